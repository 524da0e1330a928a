"""Reading a pipeline's views from Redis, by kind: what ``kappa pipelines view`` and the lookups serve.

:func:`snapshot` reads every key of every view (a HyperLogLog as its count), for comparing two
builds of the same views key by key.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from jobs.engine.views import ALL, INDEX
from jobs.pipelines.views import Counter, Distinct, Entity, Latest, Sliding, Tumbling, View


class ViewReadError(ValueError):
    """A view read asked for something the view does not have (a key it needs, a window)."""


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_view(client: redis.Redis, prefix: str, name: str, view: View, *, key: str | None = None,
              window: int | None = None) -> dict[str, Any]:
    """One view's current value: a key's hash (entity, latest), a window's counts, a top list."""
    base = f"{prefix}:{name}"
    if isinstance(view, Entity | Latest):
        if key is None:
            raise ViewReadError(f"view {name} ({view.kind}) is read per key: give the key")
        return {"view": name, "key": key, "value": _hash(client, f"{base}:{key}", view)}
    if isinstance(view, Counter):
        top = client.zrevrange(f"{base}:{ALL}", 0, (view.top_n or 0) - 1, withscores=True)
        return {"view": name, "top": [[_s(pair[0]), int(pair[1])] for pair in top]}
    starts = sorted(int(_s(s)) for s in client.zrange(f"{base}:{INDEX}", 0, -1))
    if isinstance(view, Distinct):
        out: dict[str, Any] = {"view": name}
        if view.all_time:
            out["all_time"] = int(client.pfcount(f"{base}:{ALL}"))
        if view.window_s is not None:
            at = window if window is not None else (starts[-1] if starts else None)
            out |= {"window_start": at, "count": int(client.pfcount(f"{base}:{at}")) if at else 0}
        return out
    assert isinstance(view, Tumbling | Sliding)
    at = window if window is not None else (starts[-1] if starts else None)
    if at is None:
        return {"view": name, "window_start": None, "counts": {}}
    if isinstance(view, Tumbling):
        counts = {_s(k): int(v) for k, v in client.hgetall(f"{base}:{at}").items()}
        return {"view": name, "window_start": at, "counts": dict(sorted(counts.items()))}
    slide_ms = view.slide_s * 1000
    buckets = [at - i * slide_ms for i in range(view.window_s // view.slide_s)]
    summed: dict[str, int] = {}
    for bucket in buckets:
        for k, v in client.hgetall(f"{base}:{bucket}").items():
            summed[_s(k)] = summed.get(_s(k), 0) + int(v)
    ranked = sorted(summed.items(), key=lambda kv: (-kv[1], kv[0]))[:view.top_n or None]
    return {"view": name, "window_start": buckets[-1], "window_end": at + slide_ms,
            "top": [[item, n] for item, n in ranked]}


def _hash(client: redis.Redis, key: str, view: Entity | Latest) -> dict[str, Any] | None:
    raw = {_s(k): _s(v) for k, v in client.hgetall(key).items()}
    if not raw:
        return None
    if isinstance(view, Latest):
        return {k: json.loads(v) for k, v in sorted(raw.items()) if k != "_order"}
    out: dict[str, Any] = {}
    for field, spec in view.fields_.items():
        if field not in raw:
            continue
        if spec.max is not None:
            out[field] = json.loads(raw[field])
        elif spec.sum is not None and spec.scale:
            out[field] = int(raw[field]) / 10 ** spec.scale
        else:
            out[field] = int(raw[field])
    return out


def snapshot(client: redis.Redis, prefix: str, views: dict[str, View]) -> dict[str, Any]:
    """Every key of every view (without the prefix) with its value (a HyperLogLog: its count)."""
    out: dict[str, Any] = {}
    for name in views:
        for raw_key in sorted(client.scan_iter(match=f"{prefix}:{name}:*", count=1000)):
            key = _s(raw_key)
            kind, short = _s(client.type(key)), key[len(prefix) + 1:]
            if kind == "hash":
                out[short] = {_s(k): _s(v) for k, v in sorted(client.hgetall(key).items())}
            elif kind == "zset":
                out[short] = [[_s(pair[0]), pair[1]] for pair in client.zrange(key, 0, -1, withscores=True)]
            elif kind == "string":
                out[short] = int(client.pfcount(key))
    return out
