"""The task layer of the DAGs: one function per task, each calling what the `kappa` CLI calls.

DAG files stay thin (no heavy imports at parse time): they call these functions, which load
the config of the task's environment (the KAPPA_* that ``kappa airflow up`` passed on) and
import Spark, Kafka and the jobs only when they run. Every function returns a JSON-ready
report (an XCom) and raises a :class:`~jobs.errors.KappaError` with the operator's
next step when it cannot do its work.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from jobs.orchestration import streaming as _streaming

logger = logging.getLogger(__name__)

SINKS = ("delta", "redis", "kafka")
ensure_streaming = _streaming.ensure_streaming
stop_streaming = _streaming.stop_streaming


def _config():
    from jobs.config.load import load_config

    return load_config()


def _say(line: str) -> None:
    logger.info("%s", line)


def _check_sinks(sinks: Iterable[str]) -> list[str]:
    from jobs.errors import ConfigError

    chosen = sorted(set(sinks))
    unknown = sorted(set(chosen) - set(SINKS))
    if unknown or not chosen:
        raise ConfigError(f"sinks {chosen}: expected a non-empty subset of {list(SINKS)}")
    return chosen


def no_retry(exc: Exception) -> Exception:
    """A failure no retry can fix (range deleted, bad params): fail the task now, alert once.

    Airflow retries every other exception (``retries`` with exponential backoff); retrying a
    range that retention deleted only delays the page by the sum of the backoffs.
    """
    try:
        from airflow.sdk.exceptions import AirflowFailException
    except ImportError:  # called outside Airflow (tests, CLI): the original error
        return exc
    failure = AirflowFailException(f"{type(exc).__name__}: {exc}")
    failure.__cause__ = exc
    return failure


def streaming_health(max_batch_age_s: float, max_offsets_behind: int,
                     query: str | None = None) -> dict[str, Any]:
    """``streaming_lifecycle``'s health check; a dead job fails the task at once (no retries)."""
    try:
        return _streaming.streaming_health(max_batch_age_s, max_offsets_behind, query)
    except _streaming.StreamingDead as exc:
        raise no_retry(exc) from exc


def replay_interval(start: datetime, end: datetime, sinks: Iterable[str], dry_run: bool) -> dict[str, Any]:
    """The ``replay`` DAG: the data interval's offsets (by timestamp), pre-flight, then replay.

    What no retry can fix (the topic does not exist, the range is no longer retained, bad
    params) fails the task at once (:func:`no_retry`).
    """
    from jobs.errors import ConfigError
    from jobs.orchestration.ranges import RangeNotRetained, TopicMissing, resolve_interval

    cfg = _config()
    try:
        rng = resolve_interval(cfg, cfg.streaming.source_topic, start, end)
        _say(f"interval {start.isoformat()} -> {end.isoformat()} is offsets {rng.as_dict()}")
        return replay_range(rng, sinks, dry_run, start)
    except (TopicMissing, RangeNotRetained, ConfigError) as exc:
        raise no_retry(exc) from exc


def backfill_offsets(starting: str | dict, ending: str | dict, sinks: Iterable[str],
                     dry_run: bool) -> dict[str, Any]:
    """The ``backfill`` DAG: an explicit offset range ``[starting, ending)`` of the source topic."""
    from jobs.errors import ConfigError
    from jobs.orchestration.ranges import OffsetRange, RangeNotRetained, TopicMissing, parse_offsets

    cfg = _config()
    topic = cfg.streaming.source_topic
    rng = OffsetRange(topic, parse_offsets(topic, starting), parse_offsets(topic, ending))
    if set(rng.start) != set(rng.end) or any(rng.start[p] > rng.end[p] for p in rng.end):
        raise no_retry(ConfigError(f"backfill range {rng.as_dict()}: starting and ending must list "
                                    "the same partitions with starting <= ending"))
    try:
        return replay_range(rng, sinks, dry_run)
    except (TopicMissing, RangeNotRetained, ConfigError) as exc:
        raise no_retry(exc) from exc


def replay_range(rng, sinks: Iterable[str], dry_run: bool, start: datetime | None = None) -> dict[str, Any]:
    """Pre-flight (retained, sinks reachable, no other replay), then one bounded run per sink tier.

    ``kafka``/``redis``: the streaming job in replay mode over exactly the range (its own
    checkpoint, named from the range, so a retry resumes it and the Redis fence makes a second
    run a no-op). ``delta``: the loader up to the range's end offsets (it commits offsets with the
    data, so the lake never gets a row twice; rows before the range not loaded yet are loaded too).
    """
    from jobs.orchestration.ranges import check_retained, replay_guard, require_topic

    cfg = _config()
    chosen = _check_sinks(sinks)
    require_topic(cfg, rng.topic)
    check_retained(cfg, rng, start)
    _check_reachable(cfg, chosen)
    report: dict[str, Any] = {"range": rng.as_dict(), "sinks": chosen, "dry_run": dry_run}
    with replay_guard(cfg, rng, hold=not dry_run):
        if dry_run:
            report["would_write"] = {sink: _would_write(cfg, sink) for sink in chosen}
            _say(f"dry run: nothing written; {report}")
            return report
        return _replay(cfg, rng, chosen, report)


def _replay(cfg, rng, chosen: list[str], report: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    stream_sinks = [sink for sink in chosen if sink != "delta"]
    if stream_sinks and rng.records:
        report["stream"] = _replay_stream(cfg, rng, stream_sinks)
    if "delta" in chosen:
        report["delta"] = _load_until(cfg, rng)
    report["duration_s"] = round(time.monotonic() - started, 2)
    _say(f"replay report: {report}")
    return report


def _would_write(cfg, sink: str) -> str:
    topics = ", ".join((cfg.streaming.analyzed_topic, cfg.streaming.dlq_topic, cfg.streaming.summaries_topic))
    return {"kafka": f"{topics} for the range (keyed; duplicates removable by source offset)",
            "redis": "summary increments fenced per partition (already applied offsets are skipped)",
            "delta": "the loader's tables fed by the source topic, up to the range's end offsets"}[sink]


def _check_reachable(cfg, sinks: list[str]) -> None:
    from jobs.errors import KappaError
    from jobs.stack.health import kafka_healthy, redis_healthy

    problems = [kafka_healthy(cfg.kafka.client_config())]
    if "redis" in sinks:
        problems.append(redis_healthy(cfg.redis.client_kwargs()))
    found = [p for p in problems if p]
    if found:
        raise KappaError(f"pre-flight: a sink is unreachable ({'; '.join(found)}); start it "
                         "(`kappa stack up`) or fix the config, then clear the task")


def _replay_stream(cfg, rng, sinks: list[str]) -> dict[str, Any]:
    from jobs.streaming.attach import run_stream
    from jobs.streaming.run_spec import RunSpec

    spec = RunSpec(mode="replay", starting=rng.starting(), ending=rng.ending(), sinks=frozenset(sinks))
    return run_stream(cfg, spec, progress=_say).as_dict()


def _load_until(cfg, rng) -> list[dict[str, Any]]:
    from jobs.errors import KappaError
    from jobs.loader.attach import run_load
    from jobs.loader.offsets import Until
    from jobs.loader.tables import targets

    chosen = [t for t in targets(cfg) if t.topic == rng.topic]
    results = [r.as_dict() for r in run_load(cfg, chosen, Until("offsets", offsets={
        rng.topic: dict(rng.end)}), _say, app_name="kappa-airflow-replay-load")]
    failed = [r for r in results if r["outcome"] in ("error", "conflict", "failed_quality")]
    if failed:
        raise KappaError(f"load failed: {failed}; see docs/runbooks/loader.md")
    return results


def load_tables(tables: list[str] | None = None) -> list[dict[str, Any]]:
    """``kafka_to_delta``: ``kappa load`` (every enabled table up to the latest offsets)."""
    from jobs.errors import KappaError
    from jobs.loader.attach import run_load
    from jobs.loader.offsets import parse_until
    from jobs.loader.tables import targets

    cfg = _config()
    results = [r.as_dict() for r in run_load(cfg, targets(cfg, tables), parse_until(None), _say,
                                             app_name="kappa-airflow-load")]
    failed = [r for r in results if r["outcome"] in ("error", "conflict", "failed_quality")]
    if failed:
        raise KappaError(f"load failed for {[r['table'] for r in failed]}: {failed}; see "
                         "docs/runbooks/loader.md")
    return results


def quality_report(runs: int = 5) -> list[dict[str, Any]]:
    """``data_quality``: ``kappa quality report``; fails when a table's last validation failed."""
    from jobs.errors import KappaError
    from jobs.loader.quality import report

    entries = report(_config(), runs)
    latest: dict[str, dict[str, Any]] = {}
    for entry in entries:
        latest.setdefault(entry["table"], entry)
    failing = {table: entry["failed"] for table, entry in latest.items()
               if any(failure.get("blocking") for failure in entry["failed"])}
    if failing:
        raise KappaError(f"data quality: blocking expectations failed in {failing}; see "
                         "docs/runbooks/data-quality.md")
    return entries


def maintain_tables(dry_run: bool = False) -> list[dict[str, Any]]:
    """``delta_maintenance``: ``kappa maintain`` (compaction of closed partitions, vacuum)."""
    from jobs.loader.maintain import run_maintenance
    from jobs.loader.tables import targets

    cfg = _config()
    return run_maintenance(cfg, targets(cfg), None, dry_run, _say)


def delta_tables() -> list[str]:
    """The Delta tables the loader writes (names for Airflow Assets), from config only."""
    cfg = _config()
    return sorted(name for name, table in cfg.loader.tables.items() if table.enabled)


def checkpoint_recovery(action: str, dry_run: bool, timestamp: str | None = None,
                        query: str | None = None) -> dict[str, Any]:
    """``checkpoint_recovery``: ``kappa stream checkpoint inspect | rebuild | reset``."""
    import importlib

    from jobs.errors import ConfigError, KappaError

    if action not in ("inspect", "resume", "rebuild", "reset"):
        raise ConfigError(f"action {action!r}: expected inspect, resume, rebuild or reset")
    try:  # the module behind `kappa stream checkpoint inspect | rebuild | reset`
        checkpoint = importlib.import_module("jobs.streaming.checkpoint")
    except ModuleNotFoundError as exc:
        raise KappaError("checkpoint recovery calls jobs.streaming.checkpoint (`kappa stream checkpoint`), "
                         f"which this installation does not have ({exc}); recover by hand with "
                         "docs/runbooks/airflow.md#checkpoint-recovery") from exc

    cfg = _config()
    plan = checkpoint.inspect(cfg, query)
    _say(f"checkpoint: {plan}")
    if action in ("inspect", "resume") or dry_run:
        return {"action": action, "dry_run": dry_run, "inspect": plan}
    if action == "rebuild":
        return {"action": action, "result": checkpoint.rebuild(cfg, query, progress=_say)}
    if not timestamp:
        raise ConfigError("action reset needs a timestamp (ISO 8601 with zone)")
    return {"action": action, "result": checkpoint.reset(cfg, query, timestamp, progress=_say)}
