"""`make demo` (kappa demo) runs end to end on the embedded stack and reconciles its counts."""

from __future__ import annotations

import pytest

SAMPLE_VALID = 1996  # data/sample/README.md: 2,000 lines, 4 of them malformed


@pytest.mark.slow
def test_demo_runs_and_reconciles(run_kappa, stack):
    result = run_kappa("demo", timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = " ".join(result.stdout.split())
    assert f"accepted {SAMPLE_VALID}, rejected 4" in out
    assert f"rsvps.raw grew by {SAMPLE_VALID} records" in out
    assert "reconciled:" in out and ": yes" in out
    assert "not built yet" in out and "streaming job" in out
