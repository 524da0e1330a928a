"""The ``reprocess`` DAG's task layer: the functions ``kappa reprocess`` calls, one per task.

``start`` -> ``wait_caught_up`` -> ``diff`` -> ``approve`` (a human, in the Airflow UI) ->
``promote`` -> ``grace`` -> ``retire_previous`` (docs/runbooks/reprocess.md). Each function loads
the config of the task's environment, logs its progress and returns a JSON-ready report (an
XCom). The two waits are pokes that return at once (``version_caught_up``, ``grace_over``): the
DAG runs them as sensors in reschedule mode, so no worker slot is held while a version catches
up or the grace period runs. A wrong parameter (a current or retired version) fails the task
without retries.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from jobs.orchestration.tasks import no_retry

logger = logging.getLogger(__name__)

PROMOTE_TIMEOUT_S = 600.0
DIFF_DIR = "reprocess"


def _config():
    from jobs.config.load import load_config

    return load_config()


def _say(line: str) -> None:
    logger.info("%s", line)


def start_version(version: int) -> dict[str, Any]:
    """``kappa reprocess start``: version N's topics and live job from the earliest offset."""
    from jobs.errors import ConfigError
    from jobs.reprocess.core import ReprocessError, start

    try:
        return start(_config(), version, _say)
    except (ConfigError, ReprocessError) as exc:
        raise no_retry(exc) from exc


def version_caught_up(version: int, max_behind: int | None) -> bool:
    """One poke: whether version N's job runs and is at most ``max_behind`` records behind.

    ``max_behind`` None: no further behind than the current version's live job, as ``kappa
    reprocess promote`` waits by default.

    Raises:
        ReprocessError: the version's job does not run (it would never catch up).
    """
    from jobs.reprocess.core import ReprocessError, caught_up, live_bound, version_status
    from jobs.views.versions import read_views

    cfg = _config()
    views = read_views(cfg)
    row = version_status(cfg, version, views.state(version))
    if max_behind is None:
        max_behind = live_bound(version_status(cfg, views.current, views.state(views.current)))
    _say(f"version {version}: {row['offsets_behind_latest']} records behind (at most {max_behind} wanted), "
         f"{row['rows_per_s']:.0f} rows/s, eta {row['eta_s']} s, job pid {row['running_pid']}")
    if row["running_pid"] is None:
        raise ReprocessError(f"version {version}'s job {row['query']} does not run: see its log "
                             f"(logs/stream-{row['query']}.log under stack.data_dir), then start it "
                             f"again (`kappa reprocess start --version {version}`) and clear this task")
    return caught_up(row, max_behind)


def diff_report(version: int) -> dict[str, Any]:
    """``kappa reprocess diff``: the report as JSON under ``<stack.data_dir>/reprocess/``; the counts."""
    from jobs.reprocess.diff import diff_views, summary_lines
    from jobs.views.versions import current_version

    cfg = _config()
    current = current_version(cfg)
    report = diff_views(cfg, current, version)
    path = Path(cfg.stack.data_dir) / DIFF_DIR / f"diff-v{current}-v{version}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str))
    for line in summary_lines(report):
        _say(line)
    _say(f"report written to {path}")
    return {"current": current, "version": version, "keys_equal": report["keys_equal"],
            "keys_changed": report["keys_changed"], "only_in_current": len(report["only_in_current"]),
            "only_in_version": len(report["only_in_version"]), "report": str(path)}


def promote_version(version: int, max_behind: int | None) -> dict[str, Any]:
    """``kappa reprocess promote``: wait for catch-up, switch the pointer, stop the old job."""
    from jobs.reprocess.core import promote

    result = promote(_config(), version, max_behind=max_behind, timeout_s=PROMOTE_TIMEOUT_S, progress=_say)
    return {**result, "promoted_ms": int(time.time() * 1000)}


def grace_over(promoted_ms: int, grace_minutes: float) -> bool:
    """One poke: whether ``grace_minutes`` have passed since the promote."""
    left_s = promoted_ms / 1000 + grace_minutes * 60 - time.time()
    _say(f"grace period: {max(left_s, 0.0):.0f} s left")
    return left_s <= 0


def retire_version(version: int) -> dict[str, Any]:
    """``kappa reprocess retire``: the version's Redis keys, topics, tables and checkpoint."""
    from jobs.errors import ConfigError
    from jobs.reprocess.core import retire

    try:
        return retire(_config(), version, _say)
    except ConfigError as exc:
        raise no_retry(exc) from exc
