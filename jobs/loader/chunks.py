"""The quality gate of the executor path: the suite split over executor chunks.

Each executor chunk runs the per-row rules (:data:`PER_ROW`: a row passes or fails on its own,
so the chunks' counts add up) and reports the extremes the aggregate rules need
(:func:`chunk_report`). The driver runs the schema rule on the batch's schema and each aggregate
rule on the chunks' extremes (the max of the chunks' maxes is the batch's max) with the same GX
expectations, then judges the batch as the driver path does (:func:`combine`, then
``quality.judge``). ``ExpectColumnValuesToBeUnique`` on the table's key is measured on chunks
too when the rows arrive hash-partitioned and sorted by that key and a chunk is cut only where
the key changes (every row of a key lies in one chunk, so the chunks' duplicates add up to the
batch's: :data:`KEYED`). A rule of any other kind keeps its table on the driver path
(:func:`executor_unready`).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.loader.quality import SCHEMA_RULES, RuleResult, measure, run_suite
from jobs.loader.suites import Rule

PER_ROW = frozenset({"ExpectColumnValuesToNotBeNull", "ExpectColumnValuesToBeBetween",
                     "ExpectColumnValuesToBeInSet"})
EXTREMES = {"ExpectColumnMaxToBeBetween": "max", "ExpectColumnMinToBeBetween": "min"}
KEYED = "ExpectColumnValuesToBeUnique"


def chunked(rule: Rule, keys: tuple[str, ...]) -> bool:
    """Whether executor chunks measure ``rule`` (per-row, or unique on the chunks' sort key)."""
    return rule.expectation in PER_ROW or (rule.expectation == KEYED and (rule.kwargs.get("column"),) == keys)


def sort_keys(rules: list[Rule], keys: tuple[str, ...]) -> tuple[str, ...]:
    """The key the executor chunks must be sorted and cut by (empty: no rule needs it)."""
    return keys if any(rule.expectation == KEYED and chunked(rule, keys) for rule in rules) else ()


def executor_unready(rules: list[Rule], keys: tuple[str, ...] = ()) -> list[str]:
    """Rules that cannot be split over executor chunks (their table stays on the driver path)."""
    known = SCHEMA_RULES | set(EXTREMES)
    return [rule.name for rule in rules if rule.expectation not in known and not chunked(rule, keys)]


def chunk_report(table: str, rules: list[Rule], rows: pa.Table,
                 keys: tuple[str, ...] = ()) -> tuple[list[dict], dict[int, list[str]]]:
    """On an executor: the chunked rules' results and the aggregate rules' extremes of ``rows``.

    ``keys``: the rows' sort key, when the chunk holds every row of each of its keys. Returns one
    report per rule (``rule`` is its index in ``rules``) and the failing rows.
    """
    chosen = [(index, rule) for index, rule in enumerate(rules) if chunked(rule, keys)]
    results, reasons = measure(table, [rule for _, rule in chosen], rows)
    reports: list[dict[str, Any]] = [
        {"rule": index, "success": result.success, "element_count": result.element_count,
         "unexpected_count": result.unexpected_count, "rows_named": result.rows_named, "extreme": None}
        for (index, _), result in zip(chosen, results, strict=True)]
    for index, rule in enumerate(rules):
        column = rule.kwargs.get("column")
        if rule.expectation in EXTREMES and column in rows.column_names:
            value = getattr(pc, EXTREMES[rule.expectation])(rows[column]).as_py()
            extreme = None if value is None else json.dumps(value, default=str)
            reports.append({"rule": index, "success": True, "element_count": None, "unexpected_count": None,
                            "rows_named": True, "extreme": extreme})
    return reports, reasons


def combine(table: str, rules: list[Rule], reports: list[dict], schema: pa.Schema,
            keys: tuple[str, ...] = ()) -> list[RuleResult]:
    """On the driver: each rule's result on the whole batch from the executors' chunk reports."""
    by_rule: dict[int, list[dict]] = {}
    for report in reports:
        by_rule.setdefault(report["rule"], []).append(report)
    results = []
    for index, rule in enumerate(rules):
        chunks = by_rule.get(index, [])
        if chunked(rule, keys):
            results.append(RuleResult(
                all(chunk["success"] for chunk in chunks),
                sum(chunk["element_count"] or 0 for chunk in chunks),
                sum(chunk["unexpected_count"] or 0 for chunk in chunks),
                rows_named=all(chunk["rows_named"] for chunk in chunks)))
            continue
        frame = schema.empty_table()
        column = rule.kwargs.get("column")
        if rule.expectation in EXTREMES and column in schema.names:
            values = [json.loads(chunk["extreme"]) for chunk in chunks if chunk["extreme"] is not None]
            frame = pa.table({column: pc.cast(pa.array(values), schema.field(column).type)})
        [outcome] = run_suite(table, [rule], frame.to_pandas())
        results.append(RuleResult.from_gx(rule, outcome))
    return results
