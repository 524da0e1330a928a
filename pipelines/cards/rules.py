"""Card-velocity rules: parse a transaction, decide it against the card's previous one.

Pure functions with no engine import, so they run and are tested on their own.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipelines.cards.schema import REASONS, STATE_FIELDS, TRANSACTION_FIELDS

EARTH_RADIUS_KM = 6371.0088
MS_PER_HOUR = 3_600_000
MAX_EVENT_TIME_MS = 253_402_300_800_000  # 10000-01-01T00:00:00Z
_CURRENCY = re.compile(r"[A-Z]{3}")
_COUNTRY = re.compile(r"[A-Z]{2}")


class CardReject(Exception):
    """A transaction that goes to the dead-letter topic, with one of `REASONS`."""

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown dead-letter reason {reason!r}; use one of {', '.join(REASONS)}")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class CardParams:
    """The rule's settings (pipeline.yaml `params`, and `state.ttl_s`)."""

    max_speed_kmh: float = 900.0
    max_amount: float = 10_000.0
    same_place_km: float = 1.0
    state_ttl_s: int = 86_400

    @classmethod
    def of(cls, params: Any) -> CardParams:
        """Build from a mapping, an object with attributes, or None (all defaults)."""
        if isinstance(params, CardParams):
            return params
        if params is None:
            return cls()
        names = ("max_speed_kmh", "max_amount", "same_place_km", "state_ttl_s")
        if isinstance(params, Mapping):
            unknown = sorted(set(params) - set(names))
            if unknown:
                raise ValueError(f"unknown card params {unknown}; known: {', '.join(names)}")
            given = {n: params[n] for n in names if n in params}
        else:
            given = {n: getattr(params, n) for n in names if getattr(params, n, None) is not None}
        return cls(**given)


def haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance in km between two points given in degrees."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(a)))


def _check_value(name: str, value: Any) -> None:
    bad = ""
    if isinstance(value, float) and not math.isfinite(value):
        bad = "must be a finite number"
    elif isinstance(value, str) and not value.strip():
        bad = "must not be empty"
    elif name == "lat" and not -90 <= value <= 90:
        bad = "must be within [-90, 90]"
    elif name == "lon" and not -180 <= value <= 180:
        bad = "must be within [-180, 180]"
    elif name == "amount" and value < 0:
        bad = "must not be negative"
    elif name == "currency" and not _CURRENCY.fullmatch(value):
        bad = "must be an ISO 4217 code of three capital letters, e.g. EUR"
    elif name == "country" and not _COUNTRY.fullmatch(value):
        bad = "must be an ISO 3166 alpha-2 code of two capital letters, e.g. FR"
    if bad:
        raise CardReject("invalid_value", f"{name}={value!r} {bad}")


def parse(value: bytes | str, key: bytes | None = None, params: Any = None) -> dict[str, Any]:
    """Parse one raw transaction (JSON object) into a typed record; raise `CardReject`."""
    try:
        obj = json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CardReject("invalid_json", f"not JSON ({exc}); send one JSON object per message") from None
    if not isinstance(obj, dict):
        raise CardReject("not_an_object", f"got a JSON {type(obj).__name__}; send a JSON object")
    missing = [n for n in TRANSACTION_FIELDS if n not in obj or obj[n] is None]
    if missing:
        raise CardReject("missing_field", f"missing {', '.join(missing)}")
    for name, types in TRANSACTION_FIELDS.items():
        v = obj[name]
        if isinstance(v, bool) or not isinstance(v, types):
            want = " or ".join(t.__name__ for t in types)
            raise CardReject("wrong_type", f"{name} must be {want}, got {type(v).__name__}")
    for name in TRANSACTION_FIELDS:
        if name != "event_time_ms":
            _check_value(name, obj[name])
    if not 0 < obj["event_time_ms"] < MAX_EVENT_TIME_MS:
        raise CardReject("bad_event_time", f"event_time_ms={obj['event_time_ms']} is not epoch ms")
    if key is not None and key.decode("utf-8", "replace") != obj["card_id"]:
        raise CardReject("invalid_value", "the Kafka key must equal card_id (one partition per card)")
    record = {n: obj[n] for n in TRANSACTION_FIELDS}
    for name in ("lat", "lon", "amount"):
        record[name] = float(record[name])
    return record


def _travel(
    record: Mapping[str, Any], previous: Mapping[str, Any], p: CardParams
) -> tuple[float, float | None]:
    """Distance (km) and speed (km/h); speed None = infinite: no time between two places.

    Within `same_place_km` the two are one place (speed 0), whatever the time gap.
    """
    distance = haversine_km(previous["lat"], previous["lon"], record["lat"], record["lon"])
    gap_ms = record["event_time_ms"] - previous["event_time_ms"]
    if distance <= p.same_place_km:
        return distance, 0.0
    if gap_ms <= 0:
        return distance, None
    return distance, distance * MS_PER_HOUR / gap_ms


def analyze(
    record: Mapping[str, Any], previous: Mapping[str, Any] | None, params: Any = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Decide one transaction against its card's previous one (Kafka order).

    Returns the decision record and the card's new state (this transaction).
    """
    p = CardParams.of(params)
    now = record["event_time_ms"]
    if previous is not None and abs(now - previous["event_time_ms"]) > p.state_ttl_s * 1000:
        previous = None
    out = {n: record[n] for n in TRANSACTION_FIELDS}
    out.update(prev_txn_id=None, prev_event_time_ms=None, prev_country=None)
    out.update(prev_distance_km=None, prev_speed_kmh=None)
    reason = "ok"
    if previous is not None:
        distance, speed = _travel(record, previous, p)
        out.update(
            prev_txn_id=previous["txn_id"],
            prev_event_time_ms=previous["event_time_ms"],
            prev_country=previous["country"],
            prev_distance_km=distance,
            prev_speed_kmh=speed,
        )
        if speed is None or speed > p.max_speed_kmh:
            reason = "impossible_travel"
    if reason == "ok" and record["amount"] > p.max_amount:
        reason = "amount_over_limit"
    flagged = reason != "ok"
    out.update(decision="flag" if flagged else "approve", reason=reason, flagged=flagged)
    return out, {n: record[n] for n in STATE_FIELDS}


def fold_state(
    records: Iterable[Mapping[str, Any]], params: Any = None, key: str = "card_id"
) -> dict[str, dict[str, Any]]:
    """The state per card after `records` in Kafka order (what a replay from mid-log starts with)."""
    p = CardParams.of(params)
    state: dict[str, dict[str, Any]] = {}
    for record in records:
        _, state[record[key]] = analyze(record, state.get(record[key]), p)
    return state


def analyze_all(
    records: Iterable[Mapping[str, Any]],
    params: Any = None,
    state: Mapping[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Decide records in Kafka order starting from `state` (default: empty)."""
    p = CardParams.of(params)
    current = dict(state or {})
    out = []
    for record in records:
        decided, current[record["card_id"]] = analyze(record, current.get(record["card_id"]), p)
        out.append(decided)
    return out
