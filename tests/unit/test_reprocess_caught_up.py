"""When ``kappa reprocess promote`` considers a version caught up (docs/runbooks/reprocess.md)."""

from __future__ import annotations

from typing import Any

from jobs.reprocess.core import caught_up, live_bound


def _row(behind: int | None, pid: int | None = 4242) -> dict[str, Any]:
    return {"running_pid": pid, "offsets_behind_latest": behind}


def test_by_default_a_version_as_far_behind_as_the_live_one_under_traffic_is_caught_up() -> None:
    # 50 RSVPs/s: every batch of both jobs ends with the records that arrived while it ran
    assert caught_up(_row(37), None, live=_row(41))
    assert caught_up(_row(41), None, live=_row(41))
    assert not caught_up(_row(42), None, live=_row(41))
    assert not caught_up(_row(9_000), None, live=_row(41))


def test_by_default_without_a_live_job_it_waits_for_zero_behind() -> None:
    assert live_bound(_row(41, pid=None)) == 0
    assert live_bound(_row(None)) == 0
    assert live_bound(None) == 0
    assert not caught_up(_row(1), None, live=_row(41, pid=None))
    assert caught_up(_row(0), None, live=None)


def test_an_explicit_bound_and_a_job_that_does_not_run() -> None:
    assert caught_up(_row(5), 5) and not caught_up(_row(6), 5)
    assert not caught_up(_row(0, pid=None), None, live=_row(41))
    assert not caught_up(_row(None), 100)
