"""The card pipeline copied under a test's own names, and the right answers from the generator's labels.

The expected decisions and views are computed here from what the generator says each item is
(``ok``, ``planted_travel``, ``planted_amount``, ``malformed:<reason>``), never by the
pipeline's rules.
"""

from __future__ import annotations

import json
import math
import shutil
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from jobs.config.load import PROJECT_ROOT
from pipelines.cards.generator import Item

CARDS = PROJECT_ROOT / "pipelines" / "cards"
DECISION = {"ok": ("approve", "ok"), "planted_travel": ("flag", "impossible_travel"),
            "planted_amount": ("flag", "amount_over_limit")}
LAST_USE_FIELDS = ("merchant_id", "country", "lat", "lon", "amount", "currency", "event_time_ms")


def copy_cards(root: Path) -> tuple[Path, str]:
    """The card pipeline under ``root`` with its own name, topics, tables, query and prefix."""
    name = f"cards{uuid.uuid4().hex[:8]}"
    spec = yaml.safe_load((CARDS / "pipeline.yaml").read_text())
    spec["name"] = name
    spec["source"]["topic"] = f"{name}.raw"
    for output in ("analyzed", "dlq", "summaries"):
        spec["outputs"][output]["topic"] = f"{name}.{output}"
    spec["streaming"] |= {"query_name": f"{name}-live", "redis_prefix": name}
    renamed = {"cards.raw": f"{name}.raw", "cards.decisions": f"{name}.analyzed", "cards.dlq": f"{name}.dlq"}
    spec["tables"] = {table.replace("cards", name): {**decl, **({"topic": renamed[decl["topic"]]}
                                                               if "topic" in decl else {})}
                      for table, decl in spec["tables"].items()}
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "pipeline.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    for file in (spec.get("code", "pipeline.py"), spec.get("generator"), spec.get("collect")):
        if file:  # the files its pipeline.yaml names
            shutil.copy(CARDS / file, folder / file)
    return folder, name


def _counts() -> dict[str, int]:
    return defaultdict(int)


@dataclass
class Expected:
    """What the views and the decisions topic must hold."""

    decisions: dict[str, tuple[str, str]] = field(default_factory=dict)
    dead_letters: int = 0
    last_use: dict[str, dict[str, Any]] = field(default_factory=dict)
    flags_by_country: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(_counts))
    merchant_flags: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(_counts))
    cards_seen: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))
    amount_cents: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    transactions: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def expected(items: list[Item]) -> Expected:
    """The right answer over the generated items (event times never go back: nothing is late)."""
    out = Expected()
    for item in items:
        if item.kind.startswith("malformed"):
            out.dead_letters += 1
            continue
        txn = json.loads(item.value)
        decision, reason = DECISION[item.kind]
        out.decisions[txn["txn_id"]] = (decision, reason)
        out.last_use[txn["card_id"]] = {**{f: txn[f] for f in LAST_USE_FIELDS}, "decision": decision,
                                        "reason": reason}
        minute = txn["event_time_ms"] // 60_000 * 60_000
        if decision == "flag":
            out.flags_by_country[minute][txn["country"]] += 1
            out.merchant_flags[minute][txn["merchant_id"]] += 1
        out.cards_seen[minute].add(txn["card_id"])
        out.amount_cents[txn["currency"]] += round(txn["amount"] * 100)
        out.transactions[txn["currency"]] += 1
    return out


def family(snapshot: dict[str, Any], view: str) -> dict[str, Any]:
    """The keys of one view in a snapshot, without the view's name (its window index left out)."""
    return {key[len(view) + 1:]: value for key, value in snapshot.items()
            if key.startswith(view + ":") and key != f"{view}:windows"}


def haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance (the test's own, on a sphere of the mean Earth radius)."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    a = (math.sin((p2 - p1) / 2) ** 2
         + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2)
    return 2 * 6371.0088 * math.asin(min(1.0, math.sqrt(a)))


def slow_pairs(items: list[Item], max_speed_kmh: float) -> set[str]:
    """The txn ids of planted second ends whose speed is at most ``max_speed_kmh`` (no longer flagged)."""
    first: dict[str, dict[str, Any]] = {}
    slow = set()
    for item in items:
        if item.kind.startswith("malformed") or not (item.key or "").startswith("card-T"):
            continue
        txn = json.loads(item.value)
        if item.kind != "planted_travel":
            first[txn["card_id"]] = txn
            continue
        a = first[txn["card_id"]]
        km = haversine_km(a["lat"], a["lon"], txn["lat"], txn["lon"])
        hours = (txn["event_time_ms"] - a["event_time_ms"]) / 3_600_000
        if hours > 0 and km / hours <= max_speed_kmh:
            slow.add(txn["txn_id"])
    return slow


def relabelled(items: list[Item], approve: set[str]) -> list[Item]:
    """The items with the given planted second ends labelled ``ok``."""
    return [Item(i.key, i.value, "ok")
            if i.kind == "planted_travel" and json.loads(i.value)["txn_id"] in approve else i for i in items]


def view_keys(want: Expected) -> dict[str, Any]:
    """The keys of the flag views and the last-use view that the expected answer implies."""
    keys: dict[str, Any] = {}
    flag_views = (("flags_by_country", want.flags_by_country), ("top_merchants", want.merchant_flags))
    for view, per_minute in flag_views:
        flagged = {m: dict(c) for m, c in per_minute.items() if c}
        keys |= {f"{view}:{m}": counts for m, counts in flagged.items()}
        keys[f"{view}:windows"] = sorted(flagged)
    keys |= {f"last_use:{card}": use for card, use in want.last_use.items()}
    return keys
