"""The job's per-batch progress line counts Kafka records, from the job's own batch metrics."""

from __future__ import annotations

from jobs.streaming.waiting import batch_line


def test_the_line_reports_the_jobs_record_counts_of_that_batch() -> None:
    metrics = {"batch_id": 7, "input_rows": 1000, "rows_per_s": 2500.4, "dlq_rows": 9,
               "batch_duration_ms": 400}
    assert batch_line(metrics) == "batch 7: 1000 records, 2500 records/s, 9 dead-lettered, 400 ms"
