"""Benchmark: each batch job on Spark (local[2]) against DuckDB computing the same table from
the same Delta snapshot, in the same run.

Writes ``--rows`` generated silver.rsvps rows over ``--days`` dates (and one bronze.rsvps_raw
row per RSVP, 1 % of them dead-lettered in ops.dlq) to a temporary lake with delta-rs, then per
job: ``run_job`` over every date (read by partition from the pinned snapshot, compute, replace
the partitions in one commit) and DuckDB's SQL of the same table over the same versions'
delta-rs datasets. Prints JSON: seconds and source rows/s per engine and job, output rows of
each (they must agree), peak RSS of this process (DuckDB, delta-rs, the Spark driver's Python)
and of the Spark JVM (driver and, in local mode, the executors' tasks), the command and date.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/batch.py --rows 1000000 --days 7
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
START = date(2026, 1, 1)
CITIES = ("Barcelona", "Madrid", "Valencia", "Berlin", "Paris", "London", "Lisbon", "Rome")
TOPICS = ("Salsa", "Jazz", "Go", "Hiking", "Python", "Cooking", "Yoga", "Chess", "Film", "Running")

DUCKDB_SQL = {
    "city_daily": """
        SELECT event_date, city, country, count(*) AS rsvps, count(*) FILTER (response = 'yes') AS yes,
               count(*) FILTER (response = 'no') AS no, sum(guests) AS guests,
               count(DISTINCT member_id) AS members, count(DISTINCT event_id) AS events,
               count(*) FILTER (late) / count(*) AS late_share
        FROM silver GROUP BY ALL""",
    "topic_daily": """
        WITH t AS (SELECT event_date, group_id, response, unnest(list_distinct(topics)) AS topic FROM silver),
        g AS (SELECT event_date, topic, count(*) AS rsvps, count(*) FILTER (response = 'yes') AS yes,
                     count(DISTINCT group_id) AS groups FROM t GROUP BY event_date, topic)
        SELECT *, rank() OVER (PARTITION BY event_date ORDER BY rsvps DESC) AS rank FROM g""",
    "event_stats": """
        WITH delivered AS (
            SELECT b.event_date, json_extract_string(b.value, '$.event.event_id') AS event_id,
                   json_extract_string(b.value, '$.response') AS response,
                   coalesce(TRY_CAST(json_extract_string(b.value, '$.guests') AS BIGINT), 0) AS guests
            FROM bronze b ANTI JOIN dlq d ON b.kafka_topic = d.source_topic
                 AND b.kafka_partition = d.source_partition AND b.kafka_offset = d.source_offset),
        every AS (SELECT event_date, event_id, count(*) AS delivered,
                         count(*) FILTER (response = 'yes') AS delivered_yes,
                         count(*) FILTER (response = 'no') AS delivered_no,
                         coalesce(sum(guests) FILTER (response = 'yes'), 0) AS delivered_guests
                  FROM delivered WHERE event_id IS NOT NULL GROUP BY ALL),
        latest AS (SELECT event_date, event_id, max(event_name) AS event_name, min(event_time) AS first_rsvp,
                          max(event_time) AS last_rsvp, count(*) AS rsvps,
                          count(*) FILTER (response = 'yes') AS yes, count(*) FILTER (response = 'no') AS no,
                          coalesce(sum(guests) FILTER (response = 'yes'), 0) AS guests
                   FROM silver GROUP BY ALL)
        SELECT l.*, coalesce(e.delivered, 0), coalesce(e.delivered_yes, 0), coalesce(e.delivered_no, 0),
               coalesce(e.delivered_guests, 0), l.yes + l.guests AS expected_attendance
        FROM latest l LEFT JOIN every e USING (event_date, event_id)""",
    "dlq_daily": """
        SELECT dlq_date, coalesce(reason_code, 'unknown') AS reason_code,
               coalesce(split_part(source, ':', 1), 'unknown') AS source, count(*) AS dead_letters,
               min(kafka_timestamp) AS first_at, max(kafka_timestamp) AS last_at
        FROM dlq GROUP BY ALL""",
}


def generate(rows: int, days: int, seed: int = 38) -> dict[str, pa.Table]:
    """Silver, bronze and dead-letter tables of ``rows`` RSVPs spread over ``days`` dates."""
    rng = np.random.default_rng(seed)
    start_ms = int(datetime.combine(START, datetime.min.time(), UTC).timestamp() * 1000)
    event_ms = np.sort(start_ms + rng.integers(0, days * 86_400_000, rows))
    ids = np.arange(rows, dtype=np.int64) + 1_800_000_000
    events = rng.integers(0, max(10, rows // 50), rows)
    groups = events % 997
    responses = np.where(rng.random(rows) < 0.85, "yes", "no")
    guests = np.where(rng.random(rows) < 0.85, 0, rng.integers(1, 6, rows))
    event_id = pa.array([f"e{n}" for n in events])
    topic_lists = [[TOPICS[g % len(TOPICS)], TOPICS[(g * 7 + 3) % len(TOPICS)]] for g in groups]
    times = pa.array(event_ms * 1000, pa.timestamp("us", tz="UTC"))
    dates = pc.cast(times, pa.date32())
    silver = pa.table({
        "rsvp_id": ids, "event_time_ms": event_ms, "event_time": times, "event_id": event_id,
        "event_name": pc.binary_join_element_wise("Event ", event_id, ""), "group_id": groups,
        "member_id": rng.integers(0, max(10, rows // 4), rows), "response": responses, "guests": guests,
        "topics": pa.array(topic_lists, pa.list_(pa.string())),
        "city": pa.array(np.array(CITIES)[groups % len(CITIES)]), "country": pa.array(["ES"] * rows),
        "late": rng.random(rows) < 0.02, "event_date": dates})
    value = pc.binary_join_element_wise(
        '{"rsvp_id": ', pc.cast(ids, pa.string()), ', "response": "', pa.array(responses),
        '", "guests": ', pc.cast(pa.array(guests), pa.string()), ', "event": {"event_id": "', event_id,
        '"}}', "")
    offsets = np.arange(rows, dtype=np.int64)
    bronze = pa.table({"rsvp_id": ids, "value": value, "kafka_topic": pa.array(["rsvps.raw"] * rows),
                       "kafka_partition": pa.array(np.zeros(rows, np.int32)), "kafka_offset": offsets,
                       "event_date": dates})
    dead = offsets[rng.random(rows) < 0.01]
    dlq = pa.table({"reason_code": pa.array(["invalid_value"] * len(dead)),
                    "source": pa.array([f"stream:rsvps.raw/0/{o}" for o in dead]),
                    "source_topic": pa.array(["rsvps.raw"] * len(dead)),
                    "source_partition": pa.array(np.zeros(len(dead), np.int32)), "source_offset": dead,
                    "kafka_timestamp": pc.take(times, pa.array(dead)),
                    "dlq_date": pc.take(dates, pa.array(dead))})
    return {"silver.rsvps": silver, "bronze.rsvps_raw": bronze, "ops.dlq": dlq}


def _jvm_peak_mb(spark) -> float:
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def run(rows: int, days: int) -> dict:
    """Write the lake, run every job on both engines, return the measurements."""
    import duckdb
    from deltalake import DeltaTable, write_deltalake

    from jobs.batch.jobs import pipeline_jobs
    from jobs.batch.run import batch_spark, date_range, run_job
    from jobs.config.load import load_config
    from jobs.lake.delta import table_uri

    with tempfile.TemporaryDirectory(prefix="kappa-bench-batch-") as root:
        for name, table in generate(rows, days).items():
            column = "dlq_date" if name == "ops.dlq" else "event_date"
            write_deltalake(table_uri(root, name), table, partition_by=[column])
        cfg = load_config("test", overrides={"spark.master": "local[2]", "spark.ui_enabled": False,
                                             "lake.root": root}, environ={})
        spark = batch_spark(cfg)
        dates = date_range(START - timedelta(days=1), START + timedelta(days=days + 1))
        con = duckdb.connect()
        for alias, name in (("silver", "silver.rsvps"), ("bronze", "bronze.rsvps_raw"), ("dlq", "ops.dlq")):
            con.register(alias, DeltaTable(table_uri(root, name), version=0).to_pyarrow_dataset())
        results = {}
        for name in pipeline_jobs("rsvp", cfg):
            began = time.monotonic()
            report = run_job(spark, cfg, name, dates)
            spark_s = time.monotonic() - began
            began = time.monotonic()
            duck_rows = len(con.execute(DUCKDB_SQL[name]).fetchall())
            duck_s = time.monotonic() - began
            read, duck_s = report.rows_read, max(duck_s, 1e-6)
            results[name] = {
                "source_rows": read, "output_rows": {"spark": report.rows_written, "duckdb": duck_rows},
                "spark": {"wall_s": round(spark_s, 2), "rows_per_s": round(read / spark_s)},
                "duckdb": {"wall_s": round(duck_s, 2), "rows_per_s": round(read / duck_s)},
                "spark_over_duckdb": round(spark_s / duck_s, 1)}
        jvm_mb = _jvm_peak_mb(spark)
        spark.stop()
    python_mb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return {"rows": rows, "days": days, "master": "local[2]", "jobs": results,
            "peak_rss_mb": {"python": python_mb, "spark_jvm": jvm_mb},
            "command": f"SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/batch.py --rows {rows} "
                       f"--days {days}",
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run, print the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="silver rows (default 1,000,000)")
    parser.add_argument("--days", type=int, default=7, help="dates they spread over (default 7)")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.rows, args.days), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
