"""The card rules on tiny inline data: dead-letter reasons, decisions, and the state fold."""

from __future__ import annotations

import json
import random

import pytest

from pipelines.cards.rules import CardReject, analyze, analyze_all, fold_state, parse

pytestmark = pytest.mark.unit

GOOD = {
    "txn_id": "t1", "card_id": "c1", "merchant_id": "m1", "country": "FR", "lat": 48.8566,
    "lon": 2.3522, "amount": 12.5, "currency": "EUR", "event_time_ms": 1_793_491_200_000,
}  # fmt: skip
PARAMS = {"max_speed_kmh": 900, "max_amount": 10_000, "same_place_km": 1.0, "state_ttl_s": 86_400}


def _txn(txn_id, lat, lon, t_ms, amount=10.0, country="FR", card="c1"):
    return {**GOOD, "txn_id": txn_id, "card_id": card, "lat": lat, "lon": lon, "event_time_ms": t_ms,
            "amount": amount, "country": country}  # fmt: skip


def test_parse_good_record_types_numbers_as_float():
    record = parse(json.dumps({**GOOD, "lat": 48, "amount": 12}).encode(), b"c1", PARAMS)
    assert record["lat"] == 48.0 and isinstance(record["lat"], float)
    assert record["amount"] == 12.0 and isinstance(record["amount"], float)


@pytest.mark.parametrize(
    ("value", "reason", "detail"),
    [
        (b'{"txn_id": ', "invalid_json", "not JSON"),
        (b"[1, 2]", "not_an_object", "list"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "amount"}).encode(), "missing_field", "amount"),
        (json.dumps({**GOOD, "lat": "48.8"}).encode(), "wrong_type", "lat"),
        (json.dumps({**GOOD, "amount": True}).encode(), "wrong_type", "amount"),
        (json.dumps({**GOOD, "lat": 91.0}).encode(), "invalid_value", "lat"),
        (json.dumps({**GOOD, "lon": -180.5}).encode(), "invalid_value", "lon"),
        (json.dumps({**GOOD, "amount": -1}).encode(), "invalid_value", "amount"),
        (json.dumps({**GOOD, "currency": "eur"}).encode(), "invalid_value", "currency"),
        (json.dumps({**GOOD, "country": "FRA"}).encode(), "invalid_value", "country"),
        (json.dumps({**GOOD, "event_time_ms": -5}).encode(), "bad_event_time", "event_time_ms"),
        (json.dumps({**GOOD, "event_time_ms": 1.5}).encode(), "wrong_type", "event_time_ms"),
        (json.dumps({**GOOD, "amount": float("nan")}).encode(), "invalid_value", "finite"),
    ],
)
def test_parse_rejects_with_reason(value, reason, detail):
    with pytest.raises(CardReject) as caught:
        parse(value, b"c1", PARAMS)
    assert caught.value.reason == reason
    assert detail in caught.value.detail


def test_parse_rejects_key_other_than_card_id():
    with pytest.raises(CardReject, match="Kafka key must equal card_id") as caught:
        parse(json.dumps(GOOD).encode(), b"c2", PARAMS)
    assert caught.value.reason == "invalid_value"


def test_analyze_first_use_is_approved_with_no_previous():
    out, state = analyze(_txn("t1", 48.8566, 2.3522, 0), None, PARAMS)
    assert (out["decision"], out["reason"], out["flagged"]) == ("approve", "ok", False)
    assert out["prev_txn_id"] is None and out["prev_speed_kmh"] is None
    assert state["txn_id"] == "t1"


def test_analyze_paris_to_new_york_in_one_hour_is_impossible_travel():
    # Paris -> New York is about 5,837 km (great circle); in 1 hour that is about 5,837 km/h.
    prev = _txn("t1", 48.8566, 2.3522, 0)
    out, _ = analyze(_txn("t2", 40.7128, -74.0060, 3_600_000, country="US"), prev, PARAMS)
    assert (out["decision"], out["reason"], out["flagged"]) == ("flag", "impossible_travel", True)
    assert out["prev_txn_id"] == "t1" and out["prev_country"] == "FR"
    assert 5_800 < out["prev_distance_km"] < 5_870
    assert out["prev_speed_kmh"] == pytest.approx(out["prev_distance_km"])


def test_analyze_paris_to_lyon_in_two_hours_is_approved():
    # About 392 km in 2 hours: 196 km/h, below 900.
    out, _ = analyze(_txn("t2", 45.7640, 4.8357, 7_200_000), _txn("t1", 48.8566, 2.3522, 0), PARAMS)
    assert out["reason"] == "ok"
    assert 190 < out["prev_speed_kmh"] < 200


def test_analyze_no_time_between_two_places_is_impossible_travel_with_null_speed():
    out, _ = analyze(_txn("t2", 45.7640, 4.8357, 0), _txn("t1", 48.8566, 2.3522, 1000), PARAMS)
    assert out["reason"] == "impossible_travel" and out["prev_speed_kmh"] is None


def test_analyze_same_place_at_the_same_time_is_approved():
    out, _ = analyze(_txn("t2", 48.8570, 2.3525, 0), _txn("t1", 48.8566, 2.3522, 0), PARAMS)
    assert out["reason"] == "ok" and out["prev_speed_kmh"] == 0.0


def test_analyze_previous_older_than_ttl_counts_as_none():
    prev = _txn("t1", 48.8566, 2.3522, 0)
    out, _ = analyze(_txn("t2", 40.7128, -74.0060, 86_400_001), prev, PARAMS)
    assert out["reason"] == "ok" and out["prev_txn_id"] is None


def test_analyze_amount_over_limit():
    out, _ = analyze(_txn("t1", 48.8566, 2.3522, 0, amount=10_000.01), None, PARAMS)
    assert (out["decision"], out["reason"]) == ("flag", "amount_over_limit")
    out, _ = analyze(_txn("t1", 48.8566, 2.3522, 0, amount=10_000.0), None, PARAMS)
    assert out["reason"] == "ok"


def test_previous_is_the_last_in_kafka_order_not_in_event_time():
    # t2 arrives after t3 in the log though its event time is earlier: t3's previous is t1, t2's is t3.
    log = [_txn("t1", 48.8566, 2.3522, 0), _txn("t3", 48.8566, 2.3522, 600_000),
           _txn("t2", 48.8566, 2.3522, 300_000)]  # fmt: skip
    out = analyze_all(log, PARAMS)
    assert [o["prev_txn_id"] for o in out] == [None, "t1", "t3"]


def _random_log(seed, n=300):
    rng = random.Random(seed)
    places = [(48.8566, 2.3522), (45.7640, 4.8357), (40.7128, -74.0060), (35.6762, 139.6503)]
    log, t = [], 0
    for i in range(n):
        t += rng.randrange(-600_000, 3_600_000)  # out-of-order event times too
        lat, lon = rng.choice(places)
        log.append(_txn(f"t{i}", lat, lon, t, amount=rng.uniform(1, 12_000), card=f"c{rng.randrange(8)}"))
    return log


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fold_prefix_then_analyze_rest_equals_one_pass(seed):
    log = _random_log(seed)
    whole = analyze_all(log, PARAMS)
    assert any(o["flagged"] for o in whole) and not all(o["flagged"] for o in whole)
    for cut in [*random.Random(seed).sample(range(len(log) + 1), 10), 0, len(log)]:
        state = fold_state(log[:cut], PARAMS)
        assert analyze_all(log[cut:], PARAMS, state) == whole[cut:], f"cut={cut}"


def test_unknown_param_is_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown card params \['max_sped_kmh'\]"):
        analyze(GOOD, None, {"max_sped_kmh": 900})
