"""The job's per-batch progress line counts Kafka records, not the source's range rows."""

from __future__ import annotations

from jobs.streaming.job import _batch_line


def test_the_line_reports_the_jobs_record_counts_of_that_batch() -> None:
    progress = {"batchId": 7, "numInputRows": 3, "processedRowsPerSecond": 4.2}
    metrics = {"batch_id": 7, "input_rows": 1000, "rows_per_s": 2500.4, "dlq_rows": 9,
               "batch_duration_ms": 400}
    assert _batch_line(7, progress, metrics) == (
        "batch 7: 1000 records, 2500 records/s, 9 dead-lettered, 400 ms")


def test_without_the_batchs_metrics_the_line_falls_back_to_sparks_rows() -> None:
    progress = {"batchId": 8, "numInputRows": 3, "processedRowsPerSecond": 4.2}
    assert _batch_line(8, progress, {"batch_id": 7}) == "batch 8: 3 rows, 4 rows/s"
    assert _batch_line(8, progress, {}) == "batch 8: 3 rows, 4 rows/s"
