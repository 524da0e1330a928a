"""The view kinds, implemented once: counting in the tasks, merging and the Redis writes on the driver.

A task counts its applicable records with :class:`ViewCounts` and returns the counts as rows
(:data:`ROW_SCHEMA`); the driver merges the rows of all tasks (:func:`merge`) and turns them into
the Redis commands of the fenced apply (:func:`redis_ops`). Every write is exact whatever the
batching: counts and sums are integers (a ``sum`` of a fractional field is kept in units of
``10**-scale``), a greatest value and a latest record are compared inside Redis before they are
written, and HyperLogLog adds are idempotent. So a live run in small batches, one replay and a
rebuild leave the same values under every key (docs/reference/pipeline-yaml.md, "View kinds").
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from jobs.pipelines.views import Counter, Distinct, Entity, Latest, Sliding, Tumbling, View, Where

ROW_SCHEMA = pa.schema([("kind", pa.string()), ("view", pa.string()), ("op", pa.string()),
                        ("rkey", pa.string()), ("field", pa.string()), ("window", pa.int64()),
                        ("n", pa.int64()), ("text", pa.string())])
"""One row per count, greatest value, distinct value or latest record (``kind`` ``view``); the
engine's other rows (task stats, keyed state, timings) share the schema."""
ALL = "all"
INDEX = "windows"

HMAX = """local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local a, b = cjson.decode(cur), cjson.decode(ARGV[2])
  if type(a) == type(b) and a >= b then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1"""
"""Keep the greater of the stored and the new value (JSON numbers or strings)."""
LATEST = """local cur = redis.call('HGET', KEYS[1], '_order')
if cur and cur >= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], '_order', ARGV[1], unpack(ARGV, 3))
if tonumber(ARGV[2]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return 1"""
"""Replace the hash with the new record's fields unless it holds a later record (``_order``)."""


def order_key(event_ms: int, partition: int, offset: int) -> str:
    """A record's place for ``latest``: event time, then partition and offset; compares as text."""
    return f"{max(event_ms, 0):020d}:{partition:06d}:{offset:020d}"


def matches(where: Where | None, record: Mapping[str, Any]) -> bool:
    """Whether ``record`` is one the view (or entity field) counts."""
    if where is None:
        return True
    if isinstance(where, str):
        return bool(record.get(where))
    for name, wanted in where.items():
        value = record.get(name)
        if isinstance(wanted, list):
            if value not in wanted:
                return False
        elif value != wanted:
            return False
    return True


def _items(value: Any) -> list[str]:
    """The keys a field's value counts under: each element of a list, else the value itself."""
    if value is None:
        return []
    if isinstance(value, list):
        return [_text(v) for v in value if v is not None]
    return [_text(value)]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def scaled(value: Any, scale: int) -> int:
    """A sum's addend in integer units of ``10**-scale`` (exact whatever the batching)."""
    return round(float(value) * 10 ** scale) if scale else int(value)


class ViewCounts:
    """One task's counts of its applicable records, for every view of a pipeline."""

    def __init__(self, views: Mapping[str, View], event_field: str) -> None:
        self.views, self.event_field = views, event_field
        self.incr: dict[tuple[str, str, str, str, int], int] = defaultdict(int)
        self.greatest: dict[tuple[str, str, str], Any] = {}
        self.distinct: dict[tuple[str, str, int], set[str]] = defaultdict(set)
        self.latest: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}

    def add(self, record: Mapping[str, Any], *, late: bool, partition: int, offset: int) -> None:
        """Count one analyzed record (``late``: behind its partition's stream time)."""
        event_ms = int(record[self.event_field])
        for name, view in self.views.items():
            if not matches(view.where, record):
                continue
            if isinstance(view, Counter):
                for item in _items(record.get(view.key)):
                    self.incr[(name, "zincr", name + ":" + ALL, item, 0)] += 1
            elif isinstance(view, Tumbling | Sliding):
                if late and view.on_time:
                    continue
                size_ms = (view.slide_s if isinstance(view, Sliding) else view.window_s) * 1000
                start = event_ms - event_ms % size_ms
                for item in _items(record.get(view.key)):
                    self.incr[(name, "hincr", f"{name}:{start}", item, start)] += 1
            elif isinstance(view, Entity):
                self._entity(name, view, record)
            elif isinstance(view, Distinct):
                self._distinct(name, view, record, event_ms, late)
            elif isinstance(view, Latest):
                self._latest(name, view, record, order_key(event_ms, partition, offset))

    def _entity(self, name: str, view: Entity, record: Mapping[str, Any]) -> None:
        for entity in _items(record.get(view.key)):
            rkey = f"{name}:{entity}"
            for field, spec in view.fields_.items():
                if not matches(spec.where, record):
                    continue
                if spec.count:
                    self.incr[(name, "hincr", rkey, field, 0)] += 1
                elif spec.sum is not None and record.get(spec.sum) is not None:
                    self.incr[(name, "hincr", rkey, field, 0)] += scaled(record[spec.sum], spec.scale)
                elif spec.max is not None and record.get(spec.max) is not None:
                    value, slot = record[spec.max], (name, rkey, field)
                    held = self.greatest.get(slot)
                    if held is None or (type(held) is type(value) and value > held):
                        self.greatest[slot] = value

    def _distinct(self, name: str, view: Distinct, record: Mapping[str, Any], event_ms: int,
                  late: bool) -> None:
        values = _items(record.get(view.of))
        if view.all_time:
            self.distinct[(name, f"{name}:{ALL}", 0)].update(values)
        if view.window_s is not None and not (late and view.on_time):
            start = event_ms - event_ms % (view.window_s * 1000)
            self.distinct[(name, f"{name}:{start}", start)].update(values)

    def _latest(self, name: str, view: Latest, record: Mapping[str, Any], order: str) -> None:
        for entity in _items(record.get(view.key)):
            held = self.latest.get((name, entity))
            if held is None or order > held[0]:
                self.latest[(name, entity)] = (order, {f: record.get(f) for f in view.fields_})

    def rows(self) -> list[dict[str, Any]]:
        """The counts as :data:`ROW_SCHEMA` rows."""
        out = [_row(view, op, rkey, field, window, n=n)
               for (view, op, rkey, field, window), n in self.incr.items()]
        out += [_row(view, "hmax", rkey, field, 0, text=json.dumps(value))
                for (view, rkey, field), value in self.greatest.items()]
        out += [_row(view, "pfadd", rkey, value, window)
                for (view, rkey, window), values in self.distinct.items() for value in values]
        out += [_row(view, "latest", f"{view}:{entity}", order, 0, text=json.dumps(fields, sort_keys=True))
                for (view, entity), (order, fields) in self.latest.items()]
        return out


def _row(view: str, op: str, rkey: str, field: str, window: int, *, n: int = 0,
         text: str | None = None) -> dict[str, Any]:
    return {"kind": "view", "view": view, "op": op, "rkey": rkey, "field": field, "window": window,
            "n": n, "text": text}


class Merged:
    """A batch's view rows of all tasks, merged: sums, greatest values, value sets, latest records."""

    def __init__(self) -> None:
        self.incr: dict[tuple[str, str, str, str, int], int] = defaultdict(int)
        self.greatest: dict[tuple[str, str, str], Any] = {}
        self.distinct: dict[tuple[str, str, int], set[str]] = defaultdict(set)
        self.latest: dict[tuple[str, str], tuple[str, str]] = {}

    def __len__(self) -> int:
        return len(self.incr) + len(self.greatest) + len(self.distinct) + len(self.latest)


def merge(rows: Iterable[Mapping[str, Any]]) -> Merged:
    """Merge the view rows of every task of a batch (rows of other kinds are left out)."""
    merged = Merged()
    for row in rows:
        if row["kind"] != "view":
            continue
        view, op, rkey, field = row["view"], row["op"], row["rkey"], row["field"]
        if op in ("zincr", "hincr"):
            merged.incr[(view, op, rkey, field, row["window"])] += row["n"]
        elif op == "hmax":
            value, slot = json.loads(row["text"]), (view, rkey, field)
            held = merged.greatest.get(slot)
            if held is None or (type(held) is type(value) and value > held):
                merged.greatest[slot] = value
        elif op == "pfadd":
            merged.distinct[(view, rkey, row["window"])].add(field)
        elif op == "latest":
            held_latest = merged.latest.get((view, rkey))
            if held_latest is None or field > held_latest[0]:
                merged.latest[(view, rkey)] = (field, row["text"])
    return merged


PFADD_CHUNK = 1000
"""Values per ``PFADD``: one command stays small."""


def redis_ops(merged: Merged, views: Mapping[str, View], prefix: str) -> list[list[str]]:
    """The Redis commands of a batch's merged counts, in an order that depends only on them.

    The order matters: a batch resumed after a crash between two of its fenced chunks must cut
    the same commands into the same chunks (jobs/streaming/apply_chunks.py, ``chunk_writes``).
    """
    ops: list[list[str]] = []
    expire: dict[str, int] = {}
    windows: dict[str, set[int]] = defaultdict(set)
    for (view, op, rkey, field, window), n in sorted(merged.incr.items()):
        key = f"{prefix}:{rkey}"
        ops.append(["ZINCRBY", key, str(n), field] if op == "zincr" else ["HINCRBY", key, field, str(n)])
        _ttl(views[view], key, window, (expire, windows), view)
    for (view, rkey, field), value in sorted(merged.greatest.items()):
        key = f"{prefix}:{rkey}"
        ops.append(["EVAL", HMAX, "1", key, field, json.dumps(value)])
        _ttl(views[view], key, 0, (expire, windows), view)
    for (view, rkey, window), values in sorted(merged.distinct.items()):
        key, ordered = f"{prefix}:{rkey}", sorted(values)
        for at in range(0, len(ordered), PFADD_CHUNK):
            ops.append(["PFADD", key, *ordered[at:at + PFADD_CHUNK]])
        _ttl(views[view], key, window, (expire, windows), view)
    for (view, rkey), (order, text) in sorted(merged.latest.items()):
        ttl = getattr(views[view], "ttl_s", None) or 0
        fields = [item for name, value in sorted(json.loads(text).items())
                  for item in (name, json.dumps(value))]
        ops.append(["EVAL", LATEST, "1", f"{prefix}:{rkey}", order, str(ttl), *fields])
    for view, starts in sorted(windows.items()):
        index = f"{prefix}:{view}:{INDEX}"
        ordered_starts = sorted(starts)
        for at in range(0, len(ordered_starts), PFADD_CHUNK):
            ops.append(["ZADD", index, *(str(s) for start in ordered_starts[at:at + PFADD_CHUNK]
                                         for s in (start, start))])
    ops += [["EXPIRE", key, str(ttl)] for key, ttl in sorted(expire.items())]
    return ops


def _ttl(view: View, key: str, window: int, noted: tuple[dict[str, int], dict[str, set[int]]],
         name: str) -> None:
    """Note a written key's expiry (a windowed key, or a view with ``ttl_s``) and its window."""
    expire, windows = noted
    ttl = getattr(view, "ttl_s", None)
    windowed = isinstance(view, Tumbling | Sliding) or (isinstance(view, Distinct) and window)
    if windowed:
        windows[name].add(window)
    if ttl and (windowed or isinstance(view, Entity)):
        expire[key] = ttl
