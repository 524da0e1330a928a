"""Parse and validate one RSVP value against the one schema: plain Python, no Spark.

:func:`parse` returns the typed record or the dead-letter reason. It has two paths with one
outcome: a typed ``msgspec`` decode generated from :data:`pipelines.rsvp.schema.RSVP_FIELDS`
(required fields non-null, exact JSON types, longs within 64 bits) accepts a conforming record
in one C call; anything it refuses is decoded again as plain JSON and checked field by field,
which yields the exact reason. Reasons, first match wins (docs/streaming.md):
``oversize``, ``too_deep`` / ``number_too_long``, ``invalid_json``, ``not_an_object``,
``wrong_type``, ``missing_field``, ``invalid_value``, ``bad_event_time``.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from pipelines.rsvp import schema

if TYPE_CHECKING:
    from jobs.config.load import KappaConfig

LAT_RANGE = (-90.0, 90.0)
LON_RANGE = (-180.0, 180.0)
_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")
_Long = Annotated[int, msgspec.Meta(ge=schema.LONG_MIN, le=schema.LONG_MAX)]
_ATOMIC: dict[str, Any] = {"string": str, "long": _Long, "double": float}
_TYPE_NAMES = {"long": "an integer", "double": "a number", "string": "a string",
               "struct": "an object", "array": "an array"}


@dataclass(frozen=True)
class Rules:
    """The business rules of validation (from ``streaming.*`` and ``collector.*`` config)."""

    min_event_ms: int = 946_684_800_000
    future_skew_ms: int = 300_000
    max_record_bytes: int = 65_536


def rules_from(cfg: KappaConfig) -> Rules:
    """The validation rules of the config."""
    return Rules(min_event_ms=cfg.streaming.min_event_ms,
                 future_skew_ms=cfg.streaming.future_skew_s * 1000,
                 max_record_bytes=cfg.collector.max_record_bytes)


def _struct(name: str, fields: tuple[schema.Field, ...]) -> type[msgspec.Struct]:
    """A msgspec Struct type of a schema level: required fields first (no default)."""
    required, optional = [], []
    for field in fields:
        if field.type == "struct":
            kind: Any = _struct(f"{name}_{field.name}", field.fields)
        elif field.type == "array":
            kind = list[_struct(f"{name}_{field.name}", field.fields)]  # type: ignore[misc]
        else:
            kind = _ATOMIC[field.type]
        if field.required:
            required.append((field.name, kind))
        else:
            optional.append((field.name, kind | None, None))
    return msgspec.defstruct(name, [*required, *optional], omit_defaults=True)


Rsvp = _struct("Rsvp", schema.RSVP_FIELDS)
"""The typed RSVP record (attribute access: ``rsvp.group.group_city``)."""
_TYPED = msgspec.json.Decoder(Rsvp)


_ANY = schema.STRICT_DECODER.decode  # NaN, Infinity: not JSON, as the collector decides


def parse(value: bytes | None, kafka_ms: int | None, rules: Rules) -> tuple[Any, str | None]:
    """``(record, None)`` for a valid value, else ``(None, "<code>: <detail>")``.

    Args:
        value: the Kafka record's value.
        kafka_ms: its Kafka timestamp in ms (None: unknown, the future-skew rule is skipped).
        rules: the validation rules.
    """
    size = len(value) if value is not None else 0
    if size > rules.max_record_bytes:
        return None, f"{schema.OVERSIZE}: {size} bytes > max_record_bytes {rules.max_record_bytes}"
    try:
        record = _TYPED.decode(value or b"")
    except (msgspec.ValidationError, msgspec.DecodeError):
        record = None
    if record is None:
        return None, _structural_reason(value or b"")
    return record, business_reason(record, kafka_ms, rules)


def _structural_reason(value: bytes) -> str:
    """The reason a value the typed decode refused is not a valid RSVP."""
    unsafe = schema.parser_limits(value)
    if unsafe is not None:
        return unsafe
    try:
        data = _ANY(value.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return f"{schema.INVALID_JSON}: the value is not valid JSON"
    if not isinstance(data, dict):
        return f"{schema.NOT_AN_OBJECT}: expected a JSON object"
    wrong = wrong_types(data)
    if wrong:
        return f"{schema.WRONG_TYPE}: {', '.join(wrong)}"
    missing = missing_fields(data)
    if missing:
        return f"{schema.MISSING_FIELD}: {', '.join(missing)}"
    return f"{schema.WRONG_TYPE}: a value does not match the RSVP schema"


def _fits(field: schema.Field, value: Any) -> bool:
    if field.type == "string":
        return isinstance(value, str)
    if field.type == "long":
        return type(value) is int and schema.LONG_MIN <= value <= schema.LONG_MAX
    if field.type == "double":
        return type(value) in (int, float)
    return isinstance(value, dict if field.type == "struct" else list)


def wrong_types(data: dict, fields: tuple[schema.Field, ...] = schema.RSVP_FIELDS,
                prefix: str = "") -> list[str]:
    """Present (non-null) values whose JSON type does not fit the schema, in schema order."""
    errors: list[str] = []
    for field in fields:
        value, path = data.get(field.name), f"{prefix}{field.name}"
        if value is None:
            continue
        if not _fits(field, value):
            errors.append(f"{path} must be {_TYPE_NAMES[field.type]}")
        elif field.type == "struct":
            errors.extend(wrong_types(value, field.fields, f"{path}."))
        elif field.type == "array":
            seen: list[str] = []
            for item in value:
                found = (wrong_types(item, field.fields, f"{path}[].") if isinstance(item, dict)
                         else [f"{path}[] must be an object"])
                seen.extend(error for error in found if error not in seen)
            errors.extend(seen)
    return errors


def missing_fields(data: dict, fields: tuple[schema.Field, ...] = schema.RSVP_FIELDS,
                   prefix: str = "") -> list[str]:
    """Dotted paths of required fields that are absent or null, where their parent is present."""
    missing: list[str] = []
    for field in fields:
        value, path = data.get(field.name), f"{prefix}{field.name}"
        if value is None:
            if field.required:
                missing.append(path)
        elif field.type == "struct":
            missing.extend(missing_fields(value, field.fields, f"{path}."))
        elif field.type == "array":
            for child in (c for c in field.fields if c.required):
                if any(item.get(child.name) is None for item in value):
                    missing.append(f"{path}[].{child.name}")
    return missing


@functools.lru_cache(maxsize=65_536)
def normalize_city(city: str) -> str:
    """Collapse whitespace (tabs and newlines too), trim, lower case, capitalise each word."""
    words = _WHITESPACE.sub(" ", city).strip(" ").lower().split(" ")
    return " ".join(word[:1].upper() + word[1:] for word in words)


def coordinates(record: Any) -> tuple[float, float]:
    """The venue's coordinates when the record has a venue, else the group's."""
    venue = record.venue
    if venue is not None:
        return float(venue.lat), float(venue.lon)
    return float(record.group.group_lat), float(record.group.group_lon)


def business_reason(record: Any, kafka_ms: int | None, rules: Rules) -> str | None:
    """``invalid_value`` or ``bad_event_time`` of a typed record, or None when it is valid."""
    problems = []
    if record.response not in schema.RESPONSES:
        found = json.dumps(record.response, ensure_ascii=False)
        problems.append(f"response must be yes or no, found {found}")
    if record.guests < 0:
        problems.append(f"guests must be >= 0, found {record.guests}")
    if not normalize_city(record.group.group_city):
        problems.append("group.group_city is empty")
    lat, lon = coordinates(record)
    if not LAT_RANGE[0] <= lat <= LAT_RANGE[1]:
        problems.append(f"latitude out of range: {lat!r}")
    if not LON_RANGE[0] <= lon <= LON_RANGE[1]:
        problems.append(f"longitude out of range: {lon!r}")
    if problems:
        return f"{schema.INVALID_VALUE}: {'; '.join(problems)}"
    mtime = record.mtime
    if mtime < rules.min_event_ms:
        return (f"{schema.BAD_EVENT_TIME}: mtime {mtime} is before {rules.min_event_ms} "
                "(2000-01-01)")
    if kafka_ms is not None and mtime > kafka_ms + rules.future_skew_ms:
        return (f"{schema.BAD_EVENT_TIME}: mtime {mtime} is more than {rules.future_skew_ms} ms "
                f"after the record's Kafka timestamp {kafka_ms}")
    return None
