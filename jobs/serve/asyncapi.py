"""The WebSocket endpoint described for machines: an AsyncAPI 3.0 document at ``/asyncapi.json``.

OpenAPI has no words for a WebSocket's messages, so ``/openapi.json`` points here. The document
is written from the service's side: it *sends* events and status messages, and *receives*
filter messages (docs/api.md, "Streams").
"""

from __future__ import annotations

from typing import Any

from jobs.serve.records import STREAMS, StreamShape

PATH = "/asyncapi.json"
WS_PATH = "/api/v1/ws"
STATUSES = ["connected", "filter", "error", "lagging", "overflow", "not_retained", "resume_failed"]
_STRINGS = {"type": "array", "items": {"type": "string"}}


def _query(shape: StreamShape) -> dict[str, Any]:
    return {"type": "object", "properties": {
        "stream": {**_STRINGS, "items": {"type": "string", "enum": list(STREAMS)},
                   "description": "streams to follow (repeat the parameter); default both"},
        **{d.name: {**_STRINGS, "description": f"only records carrying one of these values: "
                                               f"{d.description or d.plural} (repeat the parameter)"}
           for d in shape.dimensions},
        "last_event_id": {"type": "string", "description": (
            "resume after this event id (a Kafka position vector, e.g. a:42,17,9;s:5,3,0)")},
        "access_token": {"type": "string", "description": "the bearer token when auth is on"}}}


def _messages(shape: StreamShape) -> dict[str, Any]:
    event = {"type": "object", "required": ["type", "id", "stream", "partition", "offset", "data"],
             "properties": {"type": {"const": "event"}, "id": {"type": "string"},
                            "stream": {"enum": list(STREAMS)}, "partition": {"type": "integer"},
                            "offset": {"type": "integer"},
                            "data": {"type": "object",
                                     "description": "the Kafka record (docs/streaming.md)"}}}
    status = {"type": "object", "required": ["type", "status"], "additionalProperties": True,
              "properties": {"type": {"const": "status"}, "status": {"enum": STATUSES},
                             "detail": {"type": "string"}, "id": {"type": "string"},
                             "filter": {"type": "object"}}}
    flt = {"type": "object", "required": ["type"], "properties": {
        "type": {"const": "filter"}, "streams": _STRINGS, **{d.plural: _STRINGS for d in shape.dimensions}}}
    return {
        "event": {"summary": "one record of the analyzed or the summaries topic, with its position id",
                  "payload": event},
        "status": {"summary": "a service message: the first one is `connected`; `error` answers a bad "
                              "filter message, and the session goes on", "payload": status},
        "filter": {"summary": "replaces the whole filter; answered by a `filter` status", "payload": flt}}


def document(version: str, shape: StreamShape) -> dict[str, Any]:
    """The AsyncAPI document of the WebSocket endpoint, with the followed pipeline's filters."""
    channel = "#/channels/stream"
    return {
        "asyncapi": "3.0.0",
        "info": {"title": "kappa data access: WebSocket stream", "version": version,
                 "description": f"The analyzed records of pipeline {shape.event} and its summary "
                                "updates, filtered and resumable. Close codes: 1008 bad filter, id or "
                                "token; 1013 client limit reached."},
        "channels": {"stream": {"address": WS_PATH, "messages": _messages(shape),
                                "bindings": {"ws": {"method": "GET", "query": _query(shape)}}}},
        "operations": {
            "sendEvents": {"action": "send", "channel": {"$ref": channel},
                           "messages": [{"$ref": f"{channel}/messages/event"},
                                        {"$ref": f"{channel}/messages/status"}]},
            "receiveFilter": {"action": "receive", "channel": {"$ref": channel},
                              "messages": [{"$ref": f"{channel}/messages/filter"}]}}}
