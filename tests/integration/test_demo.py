"""`make demo` (kappa demo) runs end to end on the embedded stack and reconciles its counts."""

from __future__ import annotations

import time

import pytest

from jobs.collector.log import RECORD, Entry, MessageLog

SAMPLE_VALID = 1996  # data/sample/README.md: 2,000 lines, 4 of them malformed
LEFT_BY_AN_EARLIER_RUN = 5


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_demo_reconciles_what_it_produced_when_run_twice(run_kappa, stack, tmp_path):
    """Issue 18 item 7: an earlier run left records in the collector's log; run the demo twice."""
    log_path = tmp_path / "collector" / "log.sqlite"
    log = MessageLog(log_path)
    log.begin()
    log.append([Entry(RECORD, "rsvps.raw", f"left-{i}".encode(), b'{"rsvp_id": "left"}')
                for i in range(LEFT_BY_AN_EARLIER_RUN)], time.time())
    log.commit()
    log.close()
    env = {"KAPPA_COLLECTOR__LOG_PATH": str(log_path)}
    outputs = []
    for _ in range(2):
        result = run_kappa("demo", env=env, timeout=600)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        outputs.append(" ".join(result.stdout.split()))
    first, second = outputs
    assert f"accepted {SAMPLE_VALID}, rejected 4" in first
    assert f"rsvps.raw grew by {SAMPLE_VALID + LEFT_BY_AN_EARLIER_RUN} records" in first
    assert (f"reconciled: carried over {LEFT_BY_AN_EARLIER_RUN} + accepted {SAMPLE_VALID} - left in "
            f"the log 0 = produced {SAMPLE_VALID + LEFT_BY_AN_EARLIER_RUN}; the job read "
            f"{SAMPLE_VALID + LEFT_BY_AN_EARLIER_RUN} = {SAMPLE_VALID} valid + "
            f"{LEFT_BY_AN_EARLIER_RUN} dead-lettered: yes") in first
    assert f"rsvps.raw grew by {SAMPLE_VALID} records" in second
    assert (f"reconciled: carried over 0 + accepted {SAMPLE_VALID} - left in the log 0 = produced "
            f"{SAMPLE_VALID}; the job read {SAMPLE_VALID} = {SAMPLE_VALID} valid + 0 dead-lettered: "
            "yes") in second
    for out in outputs:
        assert "top topics (Redis, all time):" in out and "cities in the latest minute" in out
        assert "next: the Airflow UI" in out
        assert "the stack keeps running" in out and "stop it with `kappa stack down`" in out
