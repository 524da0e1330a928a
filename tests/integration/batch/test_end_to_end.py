"""Two days of generated RSVPs (late, duplicate, malformed) through Kafka and the loader into the
lake, then every batch job: each table equals a plain-Python computation written here; a
three-date backfill run twice gives identical tables and one replace per partition per run; a
late record loaded later names its date in the load's Asset extra and that date is recomputed.

The streaming job's per-record decisions are made here with its own plain-Python functions
(``validate.parse``, ``records.analyzed``) and the stream-time rule (late: more than 60 s behind
the largest valid event time before the record in its partition); the lake only ever sees what
those topics hold.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, date, datetime

import pytest
from deltalake import DeltaTable

from jobs.batch.run import date_range, run_jobs
from jobs.batch.tasks import dates_of_run, load_extras
from jobs.collector.generator import FaultMix, RsvpGenerator
from jobs.common.config import load_config
from jobs.common.delta import table_uri
from jobs.loader.load import run_load
from jobs.loader.offsets import parse_until
from jobs.loader.tables import targets
from jobs.streaming.records import analyzed, analyzed_value, dead_letter_headers
from jobs.streaming.validate import Rules, parse

pytestmark = pytest.mark.slow
TODAY = datetime.now(UTC).date()
# the last two whole days: Kafka timestamps within the topics' retention
START_MS = int(datetime.combine(date.fromordinal(TODAY.toordinal() - 2), datetime.min.time(), UTC).timestamp()
               * 1000)
COUNT, WATERMARK_MS = 400, 60_000
STEP_MS = 2 * 86_400_000 // COUNT   # two days of event time
FAULTS = FaultMix(late=0.08, duplicates=0.08, malformed=0.04)
# late records of the first minutes fall on the day before
DATES = date_range(date.fromordinal(TODAY.toordinal() - 3), TODAY)
JOBS = ["city_daily", "topic_daily", "event_stats", "dlq_daily"]
TABLES = {"city_daily": "gold.city_daily", "topic_daily": "gold.topic_daily",
          "event_stats": "gold.event_stats", "dlq_daily": "ops.dlq_daily"}


def _day(ms: int) -> date:
    return datetime.fromtimestamp(ms / 1000, UTC).date()


def _stream(lines: list[bytes], topic: str):
    """What the streaming job writes for ``lines`` (``topic``, offsets 0..): analyzed records,
    dead letters."""
    good, dead, max_event_ms = [], [], None
    for offset, line in enumerate(lines):
        kafka_ms = START_MS + offset * STEP_MS
        record, reason = parse(line, kafka_ms, Rules())
        if reason is not None:
            headers = dead_letter_headers(reason, topic, 0, offset, len(line))
            dead.append((line, kafka_ms, reason, headers))
            continue
        late = max_event_ms is not None and record.mtime < max_event_ms - WATERMARK_MS
        good.append((analyzed(record, topic, 0, offset, kafka_ms, late=late), kafka_ms))
        max_event_ms = max(max_event_ms or record.mtime, record.mtime)
    return good, dead


def _produce(props, topic, values, headers=None) -> None:
    from confluent_kafka import Producer

    producer = Producer({**props, "enable.idempotence": True})
    for index, (value, kafka_ms) in enumerate(values):
        producer.produce(topic, value=value, partition=0, timestamp=kafka_ms,
                         headers=headers[index] if headers else None)
    assert producer.flush(60) == 0


def _silver(good: list[dict]) -> list[dict]:
    latest: dict[int, dict] = {}
    for record in good:   # the loader's rule: latest event time, then source offset
        kept = latest.get(record["rsvp_id"])
        if kept is None or (record["event_time_ms"], record["source_offset"]) >= (
                kept["event_time_ms"], kept["source_offset"]):
            latest[record["rsvp_id"]] = record
    return list(latest.values())


def _yes(rows) -> int:
    return sum(row["response"] == "yes" for row in rows)


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _grouped(rows, key) -> dict:
    groups: dict = defaultdict(list)
    for row in rows:
        groups[key(row)].append(row)
    return groups


def _city_daily(silver) -> list[tuple]:
    groups = _grouped(silver, lambda r: (_day(r["event_time_ms"]), r["city"], r["country"]))
    return sorted((*key, len(rows), _yes(rows), len(rows) - _yes(rows), sum(r["guests"] for r in rows),
                   len({r["member_id"] for r in rows}), len({r["event_id"] for r in rows}),
                   sum(r["late"] for r in rows) / len(rows)) for key, rows in groups.items())


def _topic_daily(silver) -> list[tuple]:
    pairs = [(_day(r["event_time_ms"]), topic, r) for r in silver for topic in set(r["topics"])]
    groups = _grouped(pairs, lambda pair: pair[:2])
    counts = {key: len(rows) for key, rows in groups.items()}
    return sorted((day, topic, len(rows), _yes([p[2] for p in rows]),
                   len({p[2]["group_id"] for p in rows}),
                   1 + sum(n > len(rows) for (d, _), n in counts.items() if d == day))
                  for (day, topic), rows in groups.items())


def _event_stats(silver, delivered) -> list[tuple]:
    every = _grouped(delivered, lambda r: (_day(r["event_time_ms"]), r["event_id"]))
    out = []
    for key, rows in _grouped(silver, lambda r: (_day(r["event_time_ms"]), r["event_id"])).items():
        times, all_rows = [r["event_time_ms"] for r in rows], every.get(key, [])
        guests = sum(r["guests"] for r in rows if r["response"] == "yes")
        all_guests = sum(r["guests"] for r in all_rows if r["response"] == "yes")
        out.append((*key, max(r["event_name"] for r in rows), _ts(min(times)), _ts(max(times)), len(rows),
                    _yes(rows), len(rows) - _yes(rows), guests, len(all_rows), _yes(all_rows),
                    len(all_rows) - _yes(all_rows), all_guests, _yes(rows) + guests))
    return sorted(out)


def _dlq_daily(dead) -> list[tuple]:
    groups = _grouped(dead, lambda d: (_day(d[1]), d[2].split(":", 1)[0], "stream"))
    return sorted((*key, len(rows), _ts(min(d[1] for d in rows)), _ts(max(d[1] for d in rows)))
                  for key, rows in groups.items())


def _table(root: str, table: str) -> list[tuple]:
    rows = DeltaTable(table_uri(root, table)).to_pyarrow_table().to_pylist()
    return sorted(tuple(row.values()) for row in rows)


@pytest.fixture()
def lake(stack, kappa_env, topic_factory, tmp_path):
    topics = {"bronze.rsvps_raw": topic_factory(1, "raw"), "silver.rsvps": topic_factory(1, "analyzed"),
              "ops.dlq": topic_factory(1, "dlq")}
    tables = {name: {"topic": topic, "quality_policy": "quarantine"} for name, topic in topics.items()}
    root = str(tmp_path / "lake")
    env = {**kappa_env, "KAPPA_LAKE__ROOT": root, "KAPPA_LOADER__TABLES": json.dumps(tables)}
    return load_config("test", environ=env), topics, root


def test_generated_days_through_the_lake_match_a_plain_python_computation(spark, lake, kafka_props):
    cfg, topics, root = lake
    generated = list(RsvpGenerator(seed=38, faults=FAULTS, start_ms=START_MS,
                                   events_per_second=1000 / STEP_MS).generate(COUNT))
    kinds = {item.kind.split(":")[0] for item in generated}
    assert {"ok", "late", "duplicate", "malformed"} <= kinds
    lines = [item.line for item in generated]
    good, dead = _stream(lines, topics["bronze.rsvps_raw"])
    assert len(good) + len(dead) == COUNT and sum(r["late"] for r, _ in good) > 0
    _produce(kafka_props, topics["bronze.rsvps_raw"],
             [(line, START_MS + i * STEP_MS) for i, line in enumerate(lines)])
    _produce(kafka_props, topics["silver.rsvps"], [(analyzed_value(r), ms) for r, ms in good])
    _produce(kafka_props, topics["ops.dlq"], [(line, ms) for line, ms, _, _ in dead], [d[3] for d in dead])
    loads = run_load(spark, cfg, targets(cfg), parse_until("latest"))
    assert {(r.table, r.outcome) for r in loads} == {(t, "committed") for t in topics}
    records = [r for r, _ in good]
    silver = _silver(records)
    extras = load_extras([r.as_dict() for r in loads], cfg)
    assert extras["silver.rsvps"]["dates"] == sorted({_day(r["event_time_ms"]).isoformat() for r in records})

    expected = {"city_daily": _city_daily(silver), "topic_daily": _topic_daily(silver),
                "event_stats": _event_stats(silver, records), "dlq_daily": _dlq_daily(dead)}
    runs = []
    for _ in range(2):   # the three-date backfill, twice
        run_jobs(spark, cfg, JOBS, DATES)
        runs.append({job: _table(root, table) for job, table in TABLES.items()})
        for job, table in TABLES.items():
            assert runs[-1][job] == expected[job], job
            history = DeltaTable(table_uri(root, table)).history(1)[0]
            partitions = {row[0] for row in runs[-1][job]}
            assert history["operationParameters"]["mode"] == "Overwrite", table
            assert history["operationMetrics"]["num_added_files"] == len(partitions), table
            files = DeltaTable(table_uri(root, table)).file_uris()
            assert len(files) == len(partitions), table   # each partition once
    assert runs[0] == runs[1]

    late = dict(records[0], rsvp_id=records[-1]["rsvp_id"] + 1_000, source_offset=COUNT, late=True)
    _produce(kafka_props, topics["silver.rsvps"], [(analyzed_value(late), START_MS + COUNT * STEP_MS)])
    reload = run_load(spark, cfg, targets(cfg, ["silver.rsvps"]), parse_until("latest"))
    extra = load_extras([r.as_dict() for r in reload], cfg)["silver.rsvps"]
    dates = dates_of_run("asset_triggered", None, None, [extra])
    assert dates == [_day(late["event_time_ms"])]
    run_jobs(spark, cfg, ["city_daily"], dates)
    assert _table(root, "gold.city_daily") == _city_daily([*silver, late])
