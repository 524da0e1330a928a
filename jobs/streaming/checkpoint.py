"""Checkpoint recovery: inspect a query's checkpoint, rebuild it from the sink, reset it to a time.

Only this module moves or replaces a checkpoint (STYLE.md 13). The old checkpoint is never
deleted: it is renamed ``<query>.replaced-<utc time>`` beside the new one. A new checkpoint
starts where the Kafka source's ``initial-offsets.json`` says (the source reads that file before
it resolves ``startingOffsets``), so the next ``kappa stream run`` resumes exactly there.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from jobs.config.load import KappaConfig
from jobs.errors import ConfigError
from jobs.kafka.client import consumer_config
from jobs.lake import statefs
from jobs.lake.statefs import Location
from jobs.spark.kafka_io import INITIAL_OFFSETS, STATE_FOLDER
from jobs.streaming.lease import lease_holder
from jobs.streaming.preflight import watermarks
from jobs.streaming.redis_sink import RedisSummarySink
from jobs.streaming.state import (
    CheckpointError,
    PendingApplyFile,
    batch_ids,
    checkpoint_path,
    last_committed,
    last_offsets,
    lock_holder,
)
from jobs.streaming.stream_time import StreamTimeLog

logger = logging.getLogger(__name__)
Progress = Callable[[str], None]


def _query(cfg: KappaConfig, query: str | None) -> tuple[str, Location]:
    name = query or cfg.streaming.query_name
    return name, checkpoint_path(cfg.lake.checkpoint_root, name)


def _partitions(cfg: KappaConfig) -> list[tuple[str, int]]:
    consumer = Consumer(consumer_config(cfg.kafka.client_config(), "kappa-checkpoint"))
    try:
        topic = cfg.streaming.source_topic
        meta = consumer.list_topics(topic, timeout=15).topics[topic]
        if meta.error is not None:
            raise CheckpointError(f"topic {topic} cannot be described: {meta.error}")
        return [(topic, p) for p in sorted(meta.partitions)]
    finally:
        consumer.close()


def corrupt(path: Location) -> str | None:
    """The first unreadable file among the last offset and commit logs of a checkpoint, and why.

    Spark's offset log file is ``v1``, a metadata JSON line, then one JSON line of offsets per
    source; a commit file is ``v1`` and one JSON line. A torn or truncated last file (a full disk,
    a copy cut short) stops every start of the query; the remedy is a new checkpoint.
    """
    for folder, least in (("offsets", 3), ("commits", 2)):
        ids = batch_ids(path / folder)
        if not ids:
            continue
        last = path / folder / str(ids[-1])
        try:
            lines = statefs.read(last).decode().splitlines()
            for line in lines[1:]:
                if line.strip() != "-":
                    json.loads(line)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            return f"{last} is unreadable ({exc})"
        if len(lines) < least or not lines[0].startswith("v"):
            return (f"{last} has {len(lines)} line(s), expected a version line and {least - 1} "
                    "JSON line(s)")
    return None


def corrupt_remedy(name: str) -> str:
    """What to do about a corrupt checkpoint (docs/runbooks/checkpoint.md)."""
    return (f"rebuild it from the Redis fence: `kappa stream checkpoint rebuild --query {name} "
            f"--execute` (or reset it to a time: `kappa stream checkpoint reset --query {name} --to "
            "<timestamp> --execute`); the old checkpoint is kept beside the new one")


def after_failure(query: str, path: Location) -> str:
    """What a failed query leaves behind, and what the next start does with it."""
    broken = corrupt(path)
    if broken:
        return f"its checkpoint is corrupt: {broken}; {corrupt_remedy(query)}"
    planned, committed = last_offsets(path), last_committed(path)
    if planned is not None and (committed is None or planned[0] > committed):
        return (f"batch {planned[0]} was planned but not committed: the next start retries it "
                "(see platform.errors and docs/runbooks/streaming-down.md)")
    return (f"no batch was left half done (checkpoint {path}); fix the cause and start again "
            "(see platform.errors and docs/runbooks/streaming-down.md)")


def inspect(cfg: KappaConfig, query: str | None = None) -> dict[str, Any]:
    """The checkpoint's last batch and offsets against Kafka and the Redis fence."""
    name, path = _query(cfg, query)
    broken = corrupt(path)
    planned = None if broken else last_offsets(path)
    tps = _partitions(cfg)
    marks = watermarks(cfg, tps)
    fence = _fence(cfg)
    checkpointed = ({(t, int(p)): int(o) for t, parts in planned[1].items() for p, o in parts.items()}
                    if planned else {})
    partitions = []
    for tp in tps:
        earliest, latest = marks[tp]
        at = checkpointed.get(tp)
        partitions.append({
            "topic": tp[0], "partition": tp[1], "checkpoint": at, "sink_fence": fence.get(tp),
            "earliest": earliest, "latest": latest,
            "lost": at is not None and at < earliest, "behind": None if at is None else latest - at,
            "sink_minus_checkpoint": None if at is None or tp not in fence else fence[tp] - at})
    verdict = (f"corrupt: {broken}; {corrupt_remedy(name)}" if broken
               else _verdict(path, planned, partitions))
    pending = PendingApplyFile(path).read()
    return {"query": name, "checkpoint": str(path), "exists": bool(statefs.listdir(path)),
            "running_pid": lock_holder(path), "last_planned_batch": planned[0] if planned else None,
            "last_committed_batch": None if broken else last_committed(path), "partitions": partitions,
            "pending_apply_batch": pending.get("batch_id") if pending else None,
            "verdict": verdict}


def _verdict(path: Location, planned, partitions: list[dict[str, Any]]) -> str:
    if planned is None:
        return "no checkpoint: a start begins at startingOffsets (earliest)"
    if any(p["lost"] for p in partitions):
        return "offsets lost: rebuild from the sink, reset to a time, or start with --skip-lost"
    return "resumable: `kappa stream run` resumes after the last committed batch"


def _fence(cfg: KappaConfig) -> dict[tuple[str, int], int]:
    sink = RedisSummarySink(cfg)
    try:
        sink.setup()
        return sink.fence()
    finally:
        sink.close()


def rebuild(cfg: KappaConfig, query: str | None = None, *, execute: bool = True,
            progress: Progress = logger.info) -> dict[str, Any]:
    """A new checkpoint starting at the offsets the Redis fence recorded (the sink's truth)."""
    name, path = _query(cfg, query)
    fence = _fence(cfg)
    tps = _partitions(cfg)
    missing = [f"{t}-{p}" for t, p in tps if (t, p) not in fence]
    if missing:
        raise CheckpointError(
            f"the Redis fence of the summaries has no offset for {', '.join(missing)}; rebuild needs "
            "every partition. Reset to a time instead (`kappa stream checkpoint reset --to ...`)")
    start = {t: {str(p): fence[(t, p)] for tt, p in tps if tt == t} for t, _ in tps}
    return _replace(cfg, path, name, start, f"rebuild from the Redis fence {start}",
                    execute=execute, progress=progress)


def reset(cfg: KappaConfig, query: str | None, timestamp: str, *, execute: bool = True,
          progress: Progress = logger.info) -> dict[str, Any]:
    """A new checkpoint starting at the first record at or after ``timestamp`` in each partition."""
    name, path = _query(cfg, query)
    moment = _parse_time(timestamp)
    tps = _partitions(cfg)
    consumer = Consumer(consumer_config(cfg.kafka.client_config(), "kappa-checkpoint"))
    try:
        ms = int(moment.timestamp() * 1000)
        found = consumer.offsets_for_times([TopicPartition(t, p, ms) for t, p in tps], timeout=15)
    finally:
        consumer.close()
    marks = watermarks(cfg, tps)
    start: dict[str, dict[str, int]] = {}
    for tp in found:
        offset = tp.offset if tp.offset >= 0 else marks[(tp.topic, tp.partition)][1]
        start.setdefault(tp.topic, {})[str(tp.partition)] = offset
    return _replace(cfg, path, name, start, f"reset to {moment.isoformat()} = offsets {start}",
                    execute=execute, progress=progress)


def _replace(cfg: KappaConfig, path: Location, name: str, start: dict[str, dict[str, int]], what: str, *,
             execute: bool, progress: Progress) -> dict[str, Any]:
    if lock_holder(path) is not None:
        raise CheckpointError(f"query {name} runs (pid {lock_holder(path)}); stop it first "
                              "(`kappa stream stop`)")
    holder = lease_holder(cfg, str(path), name)   # a driver on another host
    if holder is not None:
        raise CheckpointError(f"query {name} runs ({holder.describe()}, its lease); stop it there first "
                              "(`kappa stream stop` on its host), or wait until its lease expired")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    backup = path.with_name(f"{path.name}.replaced-{stamp}")
    exists = bool(statefs.listdir(path))
    plan = {"query": name, "action": what, "checkpoint": str(path),
            "old_checkpoint_moved_to": str(backup) if exists else None,
            "starting_offsets": start, "executed": execute}
    progress(f"plan: {what}; move {path} -> {backup}; new checkpoint starts at {json.dumps(start)}")
    if not execute:
        progress("dry run: nothing changed (add --execute to do it)")
        return plan
    carried = _carry_stream_time(path)
    pending = PendingApplyFile(path).read()  # Redis effects not yet applied: the next start applies them
    if exists:
        statefs.move_tree(path, backup)
    if pending is not None:
        PendingApplyFile(path).write(pending)
    statefs.write(path / STATE_FOLDER / INITIAL_OFFSETS, json.dumps(start).encode())
    if carried is not None:  # facts about the log, valid for any checkpoint of these topics
        statefs.write(StreamTimeLog(path).path, carried)
    progress(f"done: the next `kappa stream run --query {name}` starts at {json.dumps(start)}")
    return plan


def _carry_stream_time(path: Location) -> bytes | None:
    try:
        return statefs.read(StreamTimeLog(path).path)
    except FileNotFoundError:
        return None


def _parse_time(text: str) -> datetime:
    try:
        moment = datetime.fromtimestamp(int(text) / 1000, tz=UTC) if text.isdigit() else (
            datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        raise ConfigError(f"timestamp {text!r}: expected ISO 8601 with a zone or epoch ms") from None
    if moment.tzinfo is None:
        raise ConfigError(f"timestamp {text!r} has no time zone; add Z or +00:00")
    return moment
