"""``kappa reprocess diff``: two view versions' Redis summaries compared key by key.

Every key of the summaries (docs/streaming.md, "Redis keys") under each version's prefix is read
and compared: hashes and sorted sets field by field, HyperLogLogs by their count. The job's
metrics and the fence (bookkeeping, not the view) are left out. Two live versions that read the
same log to the same offsets hold equal views when their code is the same; a diff taken while
one of them is still behind shows that lag as changes (``kappa reprocess status`` tells).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import redis

from jobs.config.load import KappaConfig
from jobs.views.versions import version_config

SKIPPED = ("metrics:", "fence:")
LARGEST = 20
SCAN_COUNT = 1000


def read_view(client: redis.Redis, prefix: str) -> dict[str, Any]:
    """Every summary key under ``prefix`` (without it): field -> number, or ``("hll", count)``."""
    keys = [key for key in client.scan_iter(f"{prefix}:*", count=SCAN_COUNT)
            if not key.removeprefix(f"{prefix}:").startswith(SKIPPED)]
    view: dict[str, Any] = {}
    for chunk in _chunks(keys, 500):
        with client.pipeline(transaction=False) as pipe:
            for key in chunk:
                pipe.type(key)
            kinds = pipe.execute()
        with client.pipeline(transaction=False) as pipe:
            for key, kind in zip(chunk, kinds, strict=True):
                if kind == "hash":
                    pipe.hgetall(key)
                elif kind == "string":
                    pipe.pfcount(key)
                else:
                    pipe.zrange(key, 0, -1, withscores=True)
            values = pipe.execute()
        for key, kind, value in zip(chunk, kinds, values, strict=True):
            name = key.removeprefix(f"{prefix}:")
            if kind == "hash":
                view[name] = {field: _number(v) for field, v in value.items()}
            elif kind == "string":
                view[name] = ("hll", int(value))
            else:
                view[name] = {member: _number(score) for member, score in value}
    return view


def diff_views(cfg: KappaConfig, current: int, version: int) -> dict[str, Any]:
    """The report: keys equal / changed / only in one, the largest changes, the totals."""
    client = redis.Redis(**cfg.redis.client_kwargs(), decode_responses=True, socket_timeout=60)
    try:
        prefixes = {v: version_config(cfg, v).streaming.redis_prefix for v in (current, version)}
        left, right = read_view(client, prefixes[current]), read_view(client, prefixes[version])
    finally:
        client.close()
    changed, changes = [], []
    for key in sorted(set(left) & set(right)):
        if left[key] == right[key]:
            continue
        changed.append(key)
        changes.extend(_field_changes(key, left[key], right[key]))
    changes.sort(key=lambda c: (-abs(c["delta"]), c["key"], c["field"]))
    return {
        "current": current, "version": version, "prefixes": prefixes, "taken_ms": int(time.time() * 1000),
        "keys_equal": len(set(left) & set(right)) - len(changed), "keys_changed": len(changed),
        "only_in_current": sorted(set(left) - set(right)), "only_in_version": sorted(set(right) - set(left)),
        "changed_keys": changed, "largest_changes": changes[:LARGEST],
        "totals": {"current": left.get("totals", {}), "version": right.get("totals", {})},
    }


def summary_lines(report: dict[str, Any]) -> Iterator[str]:
    """The report for a terminal."""
    yield (f"view v{report['current']} (current) vs v{report['version']}: {report['keys_equal']} keys equal, "
           f"{report['keys_changed']} changed, {len(report['only_in_current'])} only in "
           f"v{report['current']}, {len(report['only_in_version'])} only in v{report['version']}")
    yield f"totals v{report['current']}: {json.dumps(report['totals']['current'], sort_keys=True)}"
    yield f"totals v{report['version']}: {json.dumps(report['totals']['version'], sort_keys=True)}"
    for change in report["largest_changes"][:10]:
        yield (f"  {change['key']} [{change['field']}]: {change['current']} -> {change['version']} "
               f"({change['delta']:+g})")


def _field_changes(key: str, left: Any, right: Any) -> list[dict[str, Any]]:
    if isinstance(left, tuple) or isinstance(right, tuple):
        a = left[1] if isinstance(left, tuple) else 0
        b = right[1] if isinstance(right, tuple) else 0
        return [{"key": key, "field": "count", "current": a, "version": b, "delta": b - a}]
    return [{"key": key, "field": field, "current": left.get(field), "version": right.get(field),
             "delta": _delta(left.get(field), right.get(field))}
            for field in sorted(set(left) | set(right)) if left.get(field) != right.get(field)]


def _delta(a: Any, b: Any) -> float:
    x = a if isinstance(a, int | float) else 0
    y = b if isinstance(b, int | float) else 0
    return y - x


def _number(value: Any) -> Any:
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    try:
        return int(value)
    except (TypeError, ValueError):
        return value


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]
