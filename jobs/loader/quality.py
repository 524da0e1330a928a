"""Validate each batch with Great Expectations 1.x before it is committed; keep the results.

An ephemeral GX context (no files, progress bars and analytics off) validates the batch as a
pandas DataFrame. Failing rows of row-level rules are split off (policy ``quarantine``);
results go to ``ops.quality_results`` whatever the outcome (``kappa quality report``).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.common.config import KappaConfig
from jobs.common.delta import open_delta, table_uri, write_delta
from jobs.loader.suites import Rule, suite_rules
from jobs.loader.tables import QUALITY_TABLE, LoadTarget

logger = logging.getLogger(__name__)

RESULT_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("table_name", pa.string()), ("policy", pa.string()),
    ("rule", pa.string()), ("expectation", pa.string()), ("success", pa.bool_()),
    ("blocking", pa.bool_()), ("row_level", pa.bool_()), ("element_count", pa.int64()),
    ("unexpected_count", pa.int64()), ("observed", pa.string()), ("checked_at", pa.timestamp("us", "UTC")),
])


@dataclass
class Checked:
    """A validated batch: rows to commit, rows to quarantine, and the failed rules."""

    good: pa.Table
    bad: pa.Table
    failed: list[str] = field(default_factory=list)
    blocking: bool = False


@cache
def _batch_definition() -> Any:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    asset = context.data_sources.add_pandas("kappa-loader").add_dataframe_asset("batch")
    return context, asset.add_batch_definition_whole_dataframe("whole")


def _run_suite(table: str, rules: list[Rule], frame: Any) -> list[Any]:
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


def validate(cfg: KappaConfig, target: LoadTarget, rows: pa.Table, run_id: str) -> Checked:
    """Run the table's suite on the batch; split failing rows; record the results."""
    rules = suite_rules(cfg, target.spec.name)
    if not rules or rows.num_rows == 0:
        return Checked(rows, rows.slice(0, 0))
    frame = rows.to_pandas(types_mapper=None)
    outcomes = _run_suite(target.spec.name, rules, frame)
    bad_reasons: dict[int, list[str]] = {}
    failed, blocking, records = [], False, []
    for rule, outcome in zip(rules, outcomes, strict=True):
        result = outcome.result or {}
        if not outcome.success:
            text = (f"{rule.name} ({result.get('unexpected_count')} rows)" if rule.row_level
                    else f"{rule.name} (observed {result.get('observed_value')})")
            if not (rule.row_level or rule.blocking):
                logger.warning("quality warning table=%s rule=%r", target.spec.name, text)
                records.append(_result_row(run_id, target, rule, outcome.success, result))
                continue
            failed.append(text)
            indexes = result.get("unexpected_index_list") if rule.row_level else None
            blocking = blocking or rule.blocking or (rule.row_level and indexes is None)
            for index in indexes or []:
                bad_reasons.setdefault(int(index), []).append(rule.name)
        records.append(_result_row(run_id, target, rule, outcome.success, result))
    _keep_results(cfg, records)
    return _split(rows, bad_reasons, failed, blocking, run_id)


def _split(rows: pa.Table, bad_reasons: dict[int, list[str]], failed: list[str], blocking: bool,
           run_id: str) -> Checked:
    mask = pa.array([index in bad_reasons for index in range(rows.num_rows)])
    good, bad = rows.filter(pc.invert(mask)), rows.filter(mask)
    reasons = [json.dumps(bad_reasons[i]) for i in sorted(bad_reasons)]
    bad = (bad.append_column("failed_expectations", pa.array(reasons, pa.string()))
           .append_column("quarantine_run_id", pa.array([run_id] * bad.num_rows, pa.string())))
    return Checked(good, bad, failed, blocking)


def _result_row(run_id: str, target: LoadTarget, rule: Rule, success: bool, result: dict) -> dict:
    observed = result.get("observed_value")
    return {"run_id": run_id, "table_name": target.spec.name, "policy": target.policy,
            "rule": rule.name, "expectation": rule.expectation, "success": bool(success),
            "blocking": rule.blocking, "row_level": rule.row_level,
            "element_count": result.get("element_count"), "unexpected_count": result.get("unexpected_count"),
            "observed": None if observed is None else json.dumps(observed, default=str),
            "checked_at": datetime.now(UTC)}


def _keep_results(cfg: KappaConfig, records: list[dict]) -> None:
    uri = table_uri(cfg.lake.root, QUALITY_TABLE)
    write_delta(uri, pa.Table.from_pylist(records, schema=RESULT_SCHEMA), snapshot=None,
                exclusive_create=False)


def report(cfg: KappaConfig, last_runs: int = 5) -> list[dict]:
    """Per table, the last ``last_runs`` validations, newest first: passed/failed rules, bad rows."""
    results = open_delta(table_uri(cfg.lake.root, QUALITY_TABLE))
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
