"""What a failed query's error says about the next start, from its checkpoint's files."""

from __future__ import annotations

from jobs.streaming.checkpoint import after_failure

OFFSETS = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n{"rsvps.raw": {"0": 5}}\n'
COMMIT = 'v1\n{"nextBatchWatermarkMs":0}\n'


def _checkpoint(tmp_path, planned: int, committed: int):
    for batch in range(planned + 1):
        (tmp_path / "offsets").mkdir(exist_ok=True)
        (tmp_path / "offsets" / str(batch)).write_text(OFFSETS)
    for batch in range(committed + 1):
        (tmp_path / "commits").mkdir(exist_ok=True)
        (tmp_path / "commits" / str(batch)).write_text(COMMIT)
    return tmp_path


def test_a_batch_planned_and_not_committed_is_retried(tmp_path) -> None:
    text = after_failure("q", _checkpoint(tmp_path, planned=3, committed=2))
    assert text.startswith("batch 3 was planned but not committed: the next start retries it")


def test_with_every_planned_batch_committed_no_retry_is_promised(tmp_path) -> None:
    text = after_failure("q", _checkpoint(tmp_path, planned=3, committed=3))
    assert text.startswith("no batch was left half done") and "retries" not in text


def test_a_torn_commit_file_is_named_with_the_remedy(tmp_path) -> None:
    checkpoint = _checkpoint(tmp_path, planned=1, committed=1)
    (checkpoint / "commits" / "1").write_text('v1\n{"nextBatch')
    text = after_failure("q", checkpoint)
    assert text.startswith(f"its checkpoint is corrupt: {checkpoint / 'commits' / '1'} is unreadable (")
    assert "kappa stream checkpoint rebuild --query q --execute" in text
