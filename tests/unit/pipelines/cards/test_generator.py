"""The generator's planted cases, checked by a haversine written here (not the code under test)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from pipelines.cards.generator import generate
from pipelines.cards.rules import CardReject, analyze_all, parse

pytestmark = pytest.mark.unit

MAX_SPEED_KMH = 900.0
MAX_AMOUNT = 10_000.0


def plain_km(lat1, lon1, lat2, lon2):
    r = 6371.0088
    a = (math.sin(math.radians(lat2 - lat1) / 2) ** 2
         + math.cos(math.radians(lat1)) * math.cos(math.radians(lat2))
         * math.sin(math.radians(lon2 - lon1) / 2) ** 2)  # fmt: skip
    return 2 * r * math.asin(math.sqrt(a))


def expected_reasons(items):
    """The decision each well-formed transaction should get, from the items alone."""
    last, out = {}, []
    for item in items:
        if item.kind.startswith("malformed:"):
            continue
        txn = json.loads(item.value)
        prev = last.get(txn["card_id"])
        reason = "ok"
        if prev is not None:
            hours = (txn["event_time_ms"] - prev["event_time_ms"]) / 3_600_000
            km = plain_km(prev["lat"], prev["lon"], txn["lat"], txn["lon"])
            if km > 1.0 and (hours <= 0 or km / hours > MAX_SPEED_KMH):
                reason = "impossible_travel"
        if reason == "ok" and txn["amount"] > MAX_AMOUNT:
            reason = "amount_over_limit"
        last[txn["card_id"]] = txn
        out.append((txn["txn_id"], item.kind, reason))
    return out


LABEL_TO_REASON = {"ok": "ok", "planted_travel": "impossible_travel", "planted_amount": "amount_over_limit"}
ITEMS = list(generate(3000, seed=11, malformed_rate=0.02))


def test_labels_agree_with_an_independent_haversine():
    expected = expected_reasons(ITEMS)
    kinds = {kind for _, kind, _ in expected}
    assert {"ok", "planted_travel", "planted_amount"} <= kinds
    wrong = [(txn, kind, reason) for txn, kind, reason in expected if LABEL_TO_REASON[kind] != reason]
    assert wrong == []


def test_rules_decide_every_planted_case_and_approve_ordinary_traffic():
    records, kinds = [], []
    for item in ITEMS:
        try:
            records.append(parse(item.value.encode(), item.key.encode() if item.key else None))
        except CardReject as exc:
            assert item.kind == f"malformed:{exc.reason}"
            continue
        kinds.append(item.kind)
    assert len(kinds) == sum(1 for i in ITEMS if not i.kind.startswith("malformed:"))
    reasons = [d["reason"] for d in analyze_all(records, {"max_speed_kmh": MAX_SPEED_KMH})]
    assert reasons == [LABEL_TO_REASON[k] for k in kinds]
    assert kinds.count("planted_travel") >= 30 and kinds.count("planted_amount") >= 15


def test_same_seed_same_items_and_count_exact():
    assert list(generate(500, seed=3)) == list(generate(500, seed=3))
    assert list(generate(500, seed=3)) != list(generate(500, seed=4))
    assert len(list(generate(777, seed=5, malformed_rate=0.1))) == 777


def test_cli_prints_json_lines_and_refuses_bad_arguments():
    run = [sys.executable, "-m", "pipelines.cards.generator"]
    ok = subprocess.run([*run, "--count", "5", "--seed", "2"], capture_output=True, text=True, check=True)
    lines = ok.stdout.splitlines()
    assert len(lines) == 5 and all("card_id" in json.loads(line) for line in lines)
    bad = subprocess.run([*run, "--count", "-1"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr
