"""The card pipeline copied under a test's own names, and the right answers from the generator's labels.

The expected decisions and views are computed here from what the generator says each item is
(``ok``, ``planted_travel``, ``planted_amount``, ``malformed:<reason>``), never by the
pipeline's rules.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from jobs.common.config import PROJECT_ROOT
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
    shutil.copy(CARDS / "pipeline.py", folder / "pipeline.py")
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
