"""Two days of generated RSVPs (late, out-of-order, duplicate, malformed, and two the streaming
job must dead-letter) through the collector, the streaming job and the loader, then every batch
job: each table equals the plain-Python computation of tests/integration/batch/expected.py over
what the collector wrote to the raw topic. A three-date backfill run twice gives identical
tables and one replace per partition per run; a late record collected later names its date in
the load's Asset extra, and the run of that date recomputes it.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from deltalake import DeltaTable

from jobs.batch.run import run_jobs
from jobs.batch.tasks import dates_of_run, load_extras
from jobs.lake.delta import table_uri
from tests.integration.batch import expected

pytestmark = pytest.mark.slow
JOBS = ["city_daily", "topic_daily", "event_stats", "dlq_daily"]
TABLES = {"city_daily": "gold.city_daily", "topic_daily": "gold.topic_daily",
          "event_stats": "gold.event_stats", "dlq_daily": "ops.dlq_daily"}


def _table(root: str, table: str) -> list[tuple]:
    rows = DeltaTable(table_uri(root, table)).to_pyarrow_table().to_pylist()
    return sorted(tuple(row.values()) for row in rows)


def _expected(ran) -> tuple[dict[str, list[tuple]], list[expected.Rsvp]]:
    """Every batch table, computed from the raw and dead-letter topics as they are now."""
    delivered, dead = expected.stream(ran.platform.read("source_topic"))
    rows = expected.silver(delivered)
    dlq = expected.dead_letters(ran.lines, dead, ran.platform.read("dlq_topic"))
    tables = {"city_daily": expected.city_daily(rows), "topic_daily": expected.topic_daily(rows),
              "event_stats": expected.event_stats(rows, delivered), "dlq_daily": expected.dlq_daily(dlq)}
    return {job: [row for row in found if row[0] in ran.dates] for job, found in tables.items()}, delivered


def _check_replaces(root: str, tables: dict[str, list[tuple]]) -> None:
    """The last commit of each table replaced its dates in one overwrite, one file per partition."""
    for job, table in TABLES.items():
        delta = DeltaTable(table_uri(root, table))
        last = delta.history(1)[0]
        partitions = {row[0] for row in tables[job]}
        assert last["operationParameters"]["mode"] == "Overwrite", table
        assert last["operationMetrics"]["num_added_files"] == len(partitions), table
        assert len(delta.file_uris()) == len(partitions), table   # each partition once


def test_generated_days_through_the_platform_match_a_plain_python_computation(spark, batch_platform):
    ran = batch_platform
    cfg = ran.platform.cfg
    raw = ran.platform.read("source_topic")
    assert Counter(m.value for m in raw) == Counter(line.value for line in ran.lines if not line.rejected)
    delivered, dead = expected.stream(raw)
    rows = expected.silver(delivered)
    assert sorted(dead.values()) == ["bad_event_time", "invalid_value"]
    assert sum(r.late for r in rows) > 0 and len(rows) < len(delivered)   # late ones, duplicates
    rejected = {line.rejected for line in ran.lines}
    assert rejected == {None, "invalid_json", "missing_field", "wrong_type", "oversize"}
    extras = load_extras([r.as_dict() for r in ran.loads], cfg)
    assert extras["silver.rsvps"]["dates"] == sorted({r.day.isoformat() for r in rows}) == [
        day.isoformat() for day in ran.dates[:2]]

    wanted, _ = _expected(ran)
    runs = []
    for _ in range(2):   # the three-date backfill, twice
        run_jobs(spark, cfg, JOBS, ran.dates)
        runs.append({job: _table(cfg.lake.root, table) for job, table in TABLES.items()})
        for job in TABLES:
            assert runs[-1][job] == wanted[job], job
        _check_replaces(cfg.lake.root, wanted)
    assert runs[0] == runs[1]
    assert {row[0] for row in runs[0]["dlq_daily"]} == {ran.dates[2]}

    first = json.loads(next(line.value for line in ran.lines if not line.rejected))
    late_id = max(r.rsvp_id for r in delivered) + 1_000
    ran.platform.collect([json.dumps(dict(first, rsvp_id=late_id, mtime=ran.start_ms + 3_600_000)).encode()])
    assert ran.platform.stream().records_read == 1
    reload = ran.platform.load(spark)
    extra = load_extras([r.as_dict() for r in reload], cfg)["silver.rsvps"]
    wanted, delivered = _expected(ran)
    [late] = [r for r in delivered if r.rsvp_id == late_id]
    assert late.late and late.day == ran.dates[0]
    dates = dates_of_run("asset_triggered", None, None, [extra])
    assert dates == [late.day]
    run_jobs(spark, cfg, JOBS[:3], dates)
    for job, table in list(TABLES.items())[:3]:
        assert _table(cfg.lake.root, table) == wanted[job], job


def test_country_is_the_upper_case_code_tables_md_documents_in_silver_and_gold(spark, batch_platform):
    import re
    from pathlib import Path

    from jobs.batch.run import run_job

    cfg = batch_platform.platform.cfg
    run_job(spark, cfg, "city_daily", batch_platform.dates[:2])
    read = {table: DeltaTable(table_uri(cfg.lake.root, table)).to_pyarrow_table().to_pylist()
            for table in ("bronze.rsvps_raw", "silver.rsvps", "gold.city_daily")}
    sent = {json.loads(row["value"])["group"]["group_country"] for row in read["bronze.rsvps_raw"]
            if json.loads(row["value"]).get("group")}
    assert sent and all(code == code.lower() for code in sent)   # the generator sends "us", "gb", ...
    upper = {code.strip(" ").upper() for code in sent}
    assert {row["country"] for row in read["silver.rsvps"]} <= upper
    countries = {row["country"] for row in read["silver.rsvps"]}
    assert {row["country"] for row in read["gold.city_daily"]} == countries
    doc = (Path(__file__).resolve().parents[3] / "docs" / "tables.md").read_text()
    silver = doc[doc.index("**silver.rsvps**"):doc.index("**gold.rsvp_summaries**")]
    gold = doc[doc.index("**gold.city_daily**"):doc.index("**gold.topic_daily**")]
    assert re.search(r"`country` trimmed and upper case", silver), silver
    assert re.search(r"`country` \(silver's: .*upper-case\s+ISO country code", gold), gold
