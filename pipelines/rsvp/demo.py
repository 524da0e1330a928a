"""The RSVP pipeline's demo: the platform end to end on the embedded stack (``kappa demo``, ``make demo``).

``demo:`` in pipeline.yaml names this file; ``kappa demo`` imports it on its own and calls :func:`run`.

Steps: start the stack, apply the topics, collect the shipped sample of RSVP events into
``rsvps.raw`` through the collector (durable log, then Kafka), run the streaming job over this
run's offsets (a bounded replay: Redis summaries, rsvps.analyzed, rsvps.dlq, rsvps.summaries)
and print the top topics and city counts from Redis, then reconcile the counts.

Re-runnable: the reconciliation covers only what this run produced, the offsets each partition
of ``rsvps.raw`` gained between before and after the collector ran, against the collector's own
counts of this run (records an earlier run left in its log are produced first and counted as
carried over). The stack is left running; ``kappa stack down`` stops it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from jobs.config.load import PROJECT_ROOT, KappaConfig

SAMPLE = PROJECT_ROOT / "data" / "sample" / "rsvps.jsonl"
TOP_N = 5
NEXT_STEPS = (
    "the Airflow UI with the platform's DAGs: `kappa airflow up` (prints the address and login)",
    "live summaries over REST/SSE/WebSocket and the dashboard: `kappa serve`",
    "the streaming job, live: `kappa stream run --mode live` (SIGTERM stops it after a batch)",
)


def run(cfg: KappaConfig, say: Callable[[str], None]) -> int:
    """Run every step; return 0 when the counts reconcile."""
    from jobs.kafka.topics import apply_topics, list_topics
    from jobs.stack.embedded import EmbeddedStack

    say("1/4 embedded stack (nothing is started for services marked external)")
    EmbeddedStack(cfg).up(progress=say)
    say("2/4 topics")
    for result in apply_topics(cfg.kafka, cfg.topics):
        say(f"    {result.name}: {result.action}")
    before = _latest(list_topics(cfg.kafka, [cfg.collector.topic]))
    say(f"3/4 collector: {SAMPLE.relative_to(PROJECT_ROOT)} -> {cfg.collector.topic}")
    collected = _collect(cfg, say)
    after = _latest(list_topics(cfg.kafka, [cfg.collector.topic]))
    produced = sum(after[p] - before.get(p, 0) for p in after)
    say(f"    {cfg.collector.topic} grew by {produced} records")
    say(f"4/4 streaming job: this run's offsets of {cfg.collector.topic} -> Redis, rsvps.analyzed, "
        "rsvps.dlq, rsvps.summaries")
    report = _stream(cfg, say, before, after)
    expected = collected["carried"] + collected["accepted"] - collected["left"]
    streamed = report.records_read == produced == report.valid + report.dead_lettered
    ok = produced == expected and streamed
    say(f"reconciled: carried over {collected['carried']} + accepted {collected['accepted']} - "
        f"left in the log {collected['left']} = produced {produced}; the job read "
        f"{report.records_read} = {report.valid} valid + {report.dead_lettered} dead-lettered: "
        f"{'yes' if ok else 'NO'}")
    ok = _load(cfg, say) and ok
    for line in NEXT_STEPS:
        say(f"next: {line}")
    say(f"the stack keeps running (Kafka {cfg.kafka.bootstrap_servers}, Redis {cfg.redis.host}:"
        f"{cfg.redis.port}); stop it with `kappa stack down` (--wipe also deletes its data)")
    return 0 if ok else 1


def _latest(infos) -> dict[int, int]:
    """The latest offset of each partition of the (one) topic listed."""
    return {part.partition: part.latest for info in infos for part in info.partitions}


def _collect(cfg: KappaConfig, say: Callable[[str], None]) -> dict[str, int]:
    """Pull the sample file through the collector, as `kappa collect --file` does."""
    from jobs.collector import pull
    from jobs.collector.run import Source, pipeline_settings, run_collector
    from jobs.collector.service import Collector

    started = time.monotonic()
    collector = Collector(pipeline_settings(cfg, None), cfg.kafka.client_config())
    carried = collector.writer.state.pending  # an earlier run left these: produced first
    if carried:
        say(f"    {carried} record(s) an earlier run left in the collector's log are produced first")
    counts = run_collector(collector, False, Source("file", pull.file_chunks(SAMPLE)), say)
    say(f"    accepted {counts.accepted}, rejected {counts.rejected} (malformed lines, kept in "
        f"{cfg.collector.dlq_topic} with their reason) in {time.monotonic() - started:.1f}s")
    return {"carried": carried, "accepted": counts.accepted, "rejected": counts.rejected,
            "left": collector.writer.state.pending}


def _stream(cfg: KappaConfig, say: Callable[[str], None], before: dict[int, int],
            after: dict[int, int]):
    """Replay this run's range through the streaming job; print the summaries from Redis."""
    from jobs.streaming.job import RunSpec, run_stream
    from pipelines.rsvp import summaries

    topic = cfg.collector.topic
    start: dict[int | str, int] = {p: before.get(p, -2) for p in after}
    end: dict[int | str, int] = dict(after.items())
    spec = RunSpec(mode="replay", starting={topic: start}, ending={topic: end})
    report = run_stream(cfg, spec, progress=lambda line: say(f"    {line}"))
    say(f"    {report.records_read} records in {report.batches} batch(es): {report.valid} valid, "
        f"{report.dead_lettered} dead-lettered, {report.late} late, in {report.duration_s:.1f}s")
    top = summaries.top_topics(cfg, TOP_N)
    say("    top topics (Redis, all time): " + ", ".join(f"{t['item']} {t['count']}" for t in top))
    for window in summaries.cities(cfg, windows=1, n=TOP_N):
        say(f"    cities in the latest minute ({window['total']} RSVPs): "
            + ", ".join(f"{c['city']} {c['count']}" for c in window["cities"]))
    return report


def _load(cfg: KappaConfig, say: Callable[[str], None]) -> bool:
    """The loader: every topic into its Delta table exactly once, then one BI query (kappa sql)."""
    from jobs.errors import KappaError
    from jobs.loader.load import run_load
    from jobs.loader.offsets import parse_until
    from jobs.loader.sql import run_sql
    from jobs.loader.tables import targets
    from jobs.spark.session import build_spark

    say("loader: Kafka topics -> Delta tables (kappa load), then a BI query (kappa sql)")
    results = run_load(build_spark(cfg, app_name="kappa-demo-loader"), cfg, targets(cfg),
                       parse_until("latest"), progress=lambda line: say(f"    {line}"))
    query = ("SELECT city, count(*) AS rsvps FROM silver.rsvps GROUP BY city "
             "ORDER BY rsvps DESC, city LIMIT 5")
    try:
        _, rows = run_sql(cfg, query)
    except KappaError as exc:
        say(f"    BI query failed: {exc}")
        return False
    say("    top cities in silver.rsvps: " + ", ".join(f"{city} {count}" for city, count in rows))
    return all(result.outcome in ("committed", "noop") for result in results)
