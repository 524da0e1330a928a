"""Validate each batch with Great Expectations 1.x before it is committed; keep the results.

An ephemeral GX context (no files, progress bars and analytics off) validates rows as a pandas
DataFrame. Failing rows of row-level rules are split off (policy ``quarantine``); results go to
``ops.quality_results`` whatever the outcome (``kappa quality report``).

The driver path validates the whole batch here (:func:`validate`); the executor path splits
the suite over executor chunks (jobs/loader/chunks.py) and judges the batch with the same
:func:`judge` and :func:`keep_results`.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.config.load import KappaConfig
from jobs.lake.delta import open_delta, table_uri, write_delta
from jobs.lake.storage import storage_options
from jobs.loader.suites import Rule, suite_rules
from jobs.loader.tables import QUALITY_TABLE, LoadTarget

logger = logging.getLogger(__name__)

RESULT_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("table_name", pa.string()), ("policy", pa.string()),
    ("rule", pa.string()), ("expectation", pa.string()), ("success", pa.bool_()),
    ("blocking", pa.bool_()), ("row_level", pa.bool_()), ("element_count", pa.int64()),
    ("unexpected_count", pa.int64()), ("observed", pa.string()), ("checked_at", pa.timestamp("us", "UTC")),
])
SCHEMA_RULES = frozenset({"ExpectTableColumnsToMatchSet"})


@dataclass
class Checked:
    """A validated batch: rows to commit, rows to quarantine, and the failed rules."""

    good: pa.Table
    bad: pa.Table
    failed: list[str] = field(default_factory=list)
    blocking: bool = False


@dataclass(frozen=True)
class RuleResult:
    """One rule's verdict on some rows (a whole batch, or one executor chunk).

    Attributes:
        success: the rule held.
        element_count: rows checked (row-level rules).
        unexpected_count: rows that failed (row-level rules).
        observed: what an aggregate or schema rule saw (GX ``observed_value``).
        rows_named: the failing rows are known by index (else the batch cannot be split).
    """

    success: bool
    element_count: int | None = None
    unexpected_count: int | None = None
    observed: Any = None
    rows_named: bool = True

    @classmethod
    def from_gx(cls, rule: Rule, outcome: Any) -> RuleResult:
        """From a GX ``ExpectationValidationResult``."""
        result = outcome.result or {}
        named = not rule.row_level or result.get("unexpected_index_list") is not None
        return cls(bool(outcome.success), result.get("element_count"), result.get("unexpected_count"),
                   _plain(result.get("observed_value")), named)


def _plain(value: Any) -> Any:
    """A numpy scalar as a Python number, a whole float as an int.

    So an observed value reads the same whichever pandas dtype GX saw (an int column holding
    nulls arrives as float64).
    """
    if isinstance(value, np.generic):
        value = value.item()
    return int(value) if isinstance(value, float) and value.is_integer() else value


@cache
def _batch_definition() -> Any:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    asset = context.data_sources.add_pandas("kappa-loader").add_dataframe_asset("batch")
    return context, asset.add_batch_definition_whole_dataframe("whole")


def run_suite(table: str, rules: list[Rule], frame: Any) -> list[Any]:
    """GX results of ``rules`` on a pandas ``frame``, in the rules' order."""
    import great_expectations as gx

    context, definition = _batch_definition()
    suite = gx.ExpectationSuite(name=f"{table}-{len(context.suites.all())}")
    for rule in rules:
        suite.add_expectation(getattr(gx.expectations, rule.expectation)(**rule.kwargs,
                                                                          meta={"rule": rule.name}))
    suite = context.suites.add(suite)
    batch = definition.get_batch(batch_parameters={"dataframe": frame})
    results = batch.validate(suite, result_format={"result_format": "COMPLETE"}).results
    by_rule = {result.expectation_config.meta["rule"]: result for result in results}
    return [by_rule[rule.name] for rule in rules]  # GX does not keep the suite's order


def measure(table: str, rules: list[Rule], rows: pa.Table) -> tuple[list[RuleResult], dict[int, list[str]]]:
    """Run ``rules`` on ``rows``: a result per rule, and failing row index -> failed rule names.

    GX sees the columns the rules name (every column when a rule checks the schema).
    """
    if not rules:
        return [], {}
    named = {rule.kwargs.get("column") for rule in rules}
    everything = any(rule.expectation in SCHEMA_RULES for rule in rules)
    columns = [name for name in rows.column_names if everything or name in named]
    outcomes = run_suite(table, rules, rows.select(columns).to_pandas())
    results: list[RuleResult] = []
    reasons: dict[int, list[str]] = {}
    for rule, outcome in zip(rules, outcomes, strict=True):
        results.append(RuleResult.from_gx(rule, outcome))
        if rule.row_level and not outcome.success:
            for index in (outcome.result or {}).get("unexpected_index_list") or []:
                reasons.setdefault(int(index), []).append(rule.name)
    return results, reasons


def judge(target: LoadTarget, rules: list[Rule], results: list[RuleResult],
          run_id: str) -> tuple[list[str], bool, list[dict]]:
    """The failed rules (in words), whether they block the batch, and the result rows to keep."""
    failed, blocking, records = [], False, []
    for rule, result in zip(rules, results, strict=True):
        records.append(_result_row(run_id, target, rule, result))
        if result.success:
            continue
        text = (f"{rule.name} ({result.unexpected_count} rows)" if rule.row_level
                else f"{rule.name} (observed {result.observed})")
        if not (rule.row_level or rule.blocking):
            logger.warning("quality warning table=%s rule=%r", target.spec.name, text)
            continue
        failed.append(text)
        blocking = blocking or rule.blocking or not result.rows_named
    return failed, blocking, records


def validate(cfg: KappaConfig, target: LoadTarget, rows: pa.Table, run_id: str) -> Checked:
    """The driver path: run the table's suite on the batch, split failing rows, keep the results."""
    rules = suite_rules(cfg, target.spec.name, target.spec.rules)
    if not rules or rows.num_rows == 0:
        return Checked(rows, rows.slice(0, 0))
    results, reasons = measure(target.spec.name, rules, rows)
    failed, blocking, records = judge(target, rules, results, run_id)
    keep_results(cfg, records)
    good, bad = split_rows(rows, reasons, run_id)
    return Checked(good, bad, failed, blocking)


def split_rows(rows: pa.Table, reasons: dict[int, list[str]], run_id: str) -> tuple[pa.Table, pa.Table]:
    """Rows no rule failed, and failing rows plus ``failed_expectations`` and ``quarantine_run_id``."""
    flags = np.zeros(rows.num_rows, dtype=bool)
    flags[list(reasons)] = True
    mask = pa.array(flags)
    good, bad = rows.filter(pc.invert(mask)), rows.filter(mask)
    texts = [json.dumps(reasons[index]) for index in sorted(reasons)]
    bad = (bad.append_column("failed_expectations", pa.array(texts, pa.string()))
           .append_column("quarantine_run_id", pa.array([run_id] * bad.num_rows, pa.string())))
    return good, bad


def _result_row(run_id: str, target: LoadTarget, rule: Rule, result: RuleResult) -> dict:
    return {"run_id": run_id, "table_name": target.spec.name, "policy": target.policy,
            "rule": rule.name, "expectation": rule.expectation, "success": result.success,
            "blocking": rule.blocking, "row_level": rule.row_level,
            "element_count": result.element_count, "unexpected_count": result.unexpected_count,
            "observed": None if result.observed is None else json.dumps(result.observed, default=str),
            "checked_at": datetime.now(UTC)}


def keep_results(cfg: KappaConfig, records: list[dict]) -> None:
    """Append the result rows to ``ops.quality_results``."""
    uri = table_uri(cfg.lake.root, QUALITY_TABLE)
    write_delta(uri, pa.Table.from_pylist(records, schema=RESULT_SCHEMA), snapshot=None,
                exclusive_create=False, storage=storage_options(cfg.lake))


def report(cfg: KappaConfig, last_runs: int = 5) -> list[dict]:
    """Per table, the last ``last_runs`` validations, newest first: passed/failed rules, bad rows."""
    results = open_delta(table_uri(cfg.lake.root, QUALITY_TABLE), storage_options(cfg.lake))
    if results is None:
        return []
    rows = results.to_pyarrow_table().to_pylist()
    runs: dict[tuple[str, str], dict] = {}
    for row in sorted(rows, key=lambda r: r["checked_at"]):
        entry = runs.setdefault((row["table_name"], row["run_id"]), {
            "table": row["table_name"], "run_id": row["run_id"], "policy": row["policy"],
            "checked_at": row["checked_at"].isoformat(), "rows": row["element_count"],
            "passed": 0, "failed": []})
        entry["rows"] = entry["rows"] if entry["rows"] is not None else row["element_count"]
        if row["success"]:
            entry["passed"] += 1
        else:
            entry["failed"].append({"rule": row["rule"], "unexpected": row["unexpected_count"],
                                    "observed": row["observed"], "blocking": row["blocking"]})
    by_table: dict[str, list[dict]] = {}
    for entry in runs.values():
        by_table.setdefault(entry["table"], []).append(entry)
    return [entry for entries in by_table.values() for entry in reversed(entries[-last_runs:])]
