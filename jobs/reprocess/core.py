"""Reprocessing: a new view version built beside the current one, then one switch (docs/reprocess.md).

``start`` runs the same job as live (``kappa stream run --mode live --version N``) from the
earliest retained offset into version N's outputs, detached; ``status`` compares both versions'
lag; ``promote`` waits until N has caught up, moves the pointer and stops the old live job;
``retire`` deletes a version's keys, topics, tables and checkpoint. The ``reprocess`` DAG calls
these same functions.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from jobs.config.load import KappaConfig
from jobs.errors import ConfigError, KappaError
from jobs.lake import statefs
from jobs.lake.statefs import Location
from jobs.views.versions import BUILDING, RETIRED, read_views, record_version, switch_current, version_config

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]
STOP_TIMEOUT_S = 120.0


class ReprocessError(KappaError):
    """A reprocess step cannot go on; the message says why and what to do."""


def _own_outputs(base: KappaConfig, version: int) -> tuple[list[str], list[str]]:
    """Topics and tables that belong to ``version`` alone (the collector's DLQ is shared)."""
    cfg = version_config(base, version)
    shared = {base.collector.dlq_topic, base.streaming.source_topic}
    s = cfg.streaming
    topics = [t for t in (s.analyzed_topic, s.summaries_topic, s.dlq_topic) if t not in shared]
    base_tables = dict(base.loader.tables)
    tables = [name for name, spec in cfg.loader.tables.items()
              if spec.topic in topics and (version != 1 or name in base_tables)]
    return topics, tables


def job_pid(cfg: KappaConfig) -> int | None:
    """The pid of the version's live query (its lock holder), or None."""
    from jobs.streaming.state import checkpoint_path, lock_holder

    return lock_holder(checkpoint_path(cfg.lake.checkpoint_root, cfg.streaming.query_name))


def start(base: KappaConfig, version: int, progress: Progress) -> dict[str, Any]:
    """Create version N's topics and start its live job from the earliest offset (idempotent)."""
    from jobs.kafka.topics import apply_topics

    views = read_views(base)
    if version == views.current:
        raise ReprocessError(f"view version {version} is the current one; reprocess into a new version "
                             f"(e.g. --version {max([views.current, *views.versions]) + 1})")
    if views.versions.get(version, {}).get("state") == RETIRED:
        raise ReprocessError(f"view version {version} was retired; choose a new version number")
    cfg = version_config(base, version)
    topics, _ = _own_outputs(base, version)
    apply_topics(base.kafka, {name: cfg.topics[name] for name in topics if name in cfg.topics})
    pid = job_pid(cfg)
    if pid is None:
        record_version(base, version, BUILDING, started_ms=int(time.time() * 1000),
                       query=cfg.streaming.query_name)
        pid = _spawn(cfg, version, progress)
    else:
        progress(f"version {version}'s job already runs (pid {pid})")
    return {"version": version, "query": cfg.streaming.query_name, "pid": pid,
            "redis_prefix": cfg.streaming.redis_prefix, "topics": topics}


def _spawn(cfg: KappaConfig, version: int, progress: Progress) -> int:
    from jobs.orchestration.streaming import start_live

    progress(f"version {version}: starting its job, waiting for its lock")
    pid, log = start_live(cfg, cfg.streaming.query_name, ["--version", str(version)],
                          nice=cfg.streaming.reprocess_nice)
    progress(f"version {version}: job runs (pid {pid}, log {log})")
    return pid


def version_status(base: KappaConfig, version: int, state: str) -> dict[str, Any]:
    """One version's row: its live job, last batch, lag and the time to catch up at its rate."""
    cfg = version_config(base, version)
    client = redis.Redis(**cfg.redis.client_kwargs(), decode_responses=True, socket_timeout=10)
    try:
        metrics = client.hgetall(f"{cfg.streaming.redis_prefix}:metrics:{cfg.streaming.query_name}")
        fenced = bool(client.exists(f"{cfg.streaming.redis_prefix}:fence:summaries"))
    finally:
        client.close()
    behind = int(metrics["offsets_behind_latest"]) if metrics.get("offsets_behind_latest") not in (
        None, "None") else None
    rate = float(metrics.get("rows_per_s") or 0)
    emitted = int(metrics["emitted_ms"]) if metrics.get("emitted_ms") else None
    return {"version": version, "state": state, "query": cfg.streaming.query_name,
            "running_pid": job_pid(cfg), "redis_prefix": cfg.streaming.redis_prefix,
            "last_batch": int(metrics["batch_id"]) if metrics.get("batch_id") else None,
            "last_batch_age_s": round(time.time() - emitted / 1000, 1) if emitted else None,
            "offsets_behind_latest": behind, "rows_per_s": rate,
            "eta_s": round(behind / rate, 1) if behind and rate > 0 else (0.0 if behind == 0 else None),
            "redis_data": _redis_data(cfg, fenced)}


def _redis_data(cfg: KappaConfig, fenced: bool) -> str:
    """``present`` (the fence is there), ``lost`` (gone while its query committed batches), ``none yet``."""
    from jobs.streaming.state import checkpoint_path, last_offsets

    if fenced:
        return "present"
    checkpoint = checkpoint_path(cfg.lake.checkpoint_root, cfg.streaming.query_name)
    return "lost" if last_offsets(checkpoint) is not None else "none yet"


def status(base: KappaConfig) -> list[dict[str, Any]]:
    """Every version that has outputs: the current one first."""
    views = read_views(base)
    return [version_status(base, v, views.state(v)) for v in
            sorted(views.live(), key=lambda v: (v != views.current, v))]


def caught_up(row: dict[str, Any], max_behind: int | None, live: dict[str, Any] | None = None) -> bool:
    """Whether a version's job runs and its last batch left it at most ``max_behind`` behind.

    ``max_behind`` None: no further behind than the current version's running job (``live``),
    whose batches leave behind the records that arrived while they ran; 0 when it does not run
    or reports nothing.
    """
    behind = row["offsets_behind_latest"]
    if row["running_pid"] is None or behind is None:
        return False
    return behind <= (max_behind if max_behind is not None else live_bound(live))


def live_bound(live: dict[str, Any] | None) -> int:
    """How far behind the current version's running job is (0 when it does not run or report)."""
    if live is None or live["running_pid"] is None or live["offsets_behind_latest"] is None:
        return 0
    return int(live["offsets_behind_latest"])


def promote(base: KappaConfig, version: int, *, max_behind: int | None, timeout_s: float,
            progress: Progress) -> dict[str, Any]:
    """Wait until N has caught up, make it current, then stop the old version's live job.

    ``max_behind`` None waits until N is no further behind than the current version (see
    :func:`caught_up`); an int waits until N's last batch left at most that many records.
    """
    views = read_views(base)
    if version == views.current:
        raise ReprocessError(f"view version {version} is already current")
    if views.state(version) != BUILDING:
        raise ReprocessError(f"view version {version} is {views.state(version)}, not being built: "
                             f"start it first (`kappa reprocess start --version {version}`)")
    deadline = time.monotonic() + timeout_s
    while True:
        row = version_status(base, version, BUILDING)
        live = version_status(base, views.current, views.state(views.current)) if max_behind is None else None
        bound = max_behind if max_behind is not None else live_bound(live)
        if caught_up(row, bound):
            break
        if time.monotonic() > deadline:
            raise ReprocessError(
                f"version {version} has not caught up in {timeout_s:.0f} s (job pid {row['running_pid']}, "
                f"{row['offsets_behind_latest']} records behind, more than {bound}); "
                "nothing switched: check `kappa reprocess status` and retry")
        progress(f"version {version}: {row['offsets_behind_latest']} records behind (at most {bound} "
                 f"wanted), eta {row['eta_s']} s")
        time.sleep(2)
    old = views.current
    switch_current(base, version, old)
    progress(f"view version {version} is current (was {old}); readers follow it")
    stopped = stop_job(version_config(base, old), progress)
    return {"current": version, "previous": old, "previous_job_stopped": stopped}


def stop_job(cfg: KappaConfig, progress: Progress) -> bool:
    """SIGTERM a version's live job (it finishes its batch) and wait for it to exit."""
    pid = job_pid(cfg)
    if pid is None or pid <= 0:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while job_pid(cfg) is not None:
        if time.monotonic() > deadline:
            raise ReprocessError(f"query {cfg.streaming.query_name} (pid {pid}) did not stop in "
                                 f"{STOP_TIMEOUT_S:.0f} s after SIGTERM; stop it with `kappa stream stop`")
        time.sleep(0.5)
    progress(f"stopped query {cfg.streaming.query_name} (pid {pid})")
    return True


def retire(base: KappaConfig, version: int, progress: Progress) -> dict[str, Any]:
    """Delete a non-current version's Redis keys, topics, tables and checkpoint."""
    from jobs.kafka.topics import admin_client
    from jobs.lake.delta import local_path, table_uri
    from jobs.streaming.state import checkpoint_path

    views = read_views(base)
    if version == views.current:
        raise ConfigError(f"view version {version} is current: promote another version before retiring it")
    cfg = version_config(base, version)
    stop_job(cfg, progress)
    deleted_keys = _delete_keys(cfg)
    topics, tables = _own_outputs(base, version)
    admin = admin_client(base.kafka)
    present = set(admin.list_topics(timeout=15).topics)
    gone = [t for t in topics if t in present]
    for future in admin.delete_topics(gone, operation_timeout=30).values() if gone else []:
        future.result()
    removed = []
    for name in tables:
        path = local_path(table_uri(base.lake.root, name))
        if path is not None and Path(path).exists():
            shutil.rmtree(path)
            removed.append(name)
    checkpoint = checkpoint_path(base.lake.checkpoint_root, cfg.streaming.query_name)
    for found in _query_files(checkpoint):
        statefs.delete_tree(found)   # a checkpoint folder
        statefs.delete(found)        # a file beside one
    record_version(base, version, RETIRED, retired_ms=int(time.time() * 1000))
    progress(f"retired view version {version}: {deleted_keys} Redis keys, topics {gone}, tables {removed}")
    return {"version": version, "redis_keys_deleted": deleted_keys, "topics_deleted": gone,
            "tables_deleted": removed}


def _query_files(checkpoint: Location) -> list[Location]:
    """A version's live query and its replays: checkpoints, fingerprints and lock files.

    Replays of the version are named ``<query>-replay-<digest>`` (jobs/streaming/run_spec.py).
    """
    query, root = checkpoint.name, checkpoint.parent
    return [root / name for name in statefs.listdir(root)
            if name in (query, f"{query}.fingerprint.json", f"{query}.lock")
            or name.startswith(f"{query}-replay-")]


def _delete_keys(cfg: KappaConfig) -> int:
    client = redis.Redis(**cfg.redis.client_kwargs(), socket_timeout=30)
    deleted, batch = 0, []
    try:
        for key in client.scan_iter(f"{cfg.streaming.redis_prefix}:*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                deleted += client.unlink(*batch)
                batch = []
        if batch:
            deleted += client.unlink(*batch)
    finally:
        client.close()
    return deleted
