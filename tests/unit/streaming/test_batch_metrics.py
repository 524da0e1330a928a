"""A batch's metrics record from the summed task stats (pure; values written by hand)."""

from __future__ import annotations

from jobs.streaming.batch_metrics import Totals, batch_metrics, offset_bounds
from jobs.streaming.state import BatchWatermark


def stat(partition: int, applicable: bool, rows: tuple[int, int, int, int], offsets: tuple[int, int],
         max_event_ms: int | None = None) -> dict:
    return {"topic": "raw", "partition": partition, "applicable": applicable,
            "input_rows": rows[0], "valid_rows": rows[1], "dlq_rows": rows[2], "late_rows": rows[3],
            "min_offset": offsets[0], "max_offset": offsets[1], "max_event_ms": max_event_ms}


# partition 0: offsets 100-149 replayed below the fence, 150-199 new; partition 1: 0-9 new
STATS = [stat(0, False, (50, 49, 1, 0), (100, 149)), stat(0, True, (50, 48, 2, 3), (150, 199), 7_000),
         stat(1, True, (10, 10, 0, 1), (0, 9), 9_000)]


def test_offset_bounds_span_applicable_and_replayed_rows() -> None:
    assert offset_bounds(STATS) == ({"raw": {"0": 100, "1": 0}}, {"raw": {"0": 200, "1": 10}})


def test_metrics_count_every_row_and_apply_only_the_applicable() -> None:
    metrics = batch_metrics("q", 7, STATS, BatchWatermark(1_000, 61_000), max_after=61_000,
                            elapsed_s=0.5, counted=True, behind=42, emitted_ms=123)
    assert metrics == {
        "schema_version": 1, "kind": "streaming_batch", "query": "q", "batch_id": 7,
        "input_rows": 110, "valid_rows": 107, "dlq_rows": 3, "late_rows": 4, "applied_rows": 58,
        "rows_per_s": 220.0, "batch_duration_ms": 500, "watermark_ms": 1_000, "max_event_ms": 61_000,
        "start_offsets": {"raw": {"0": 100, "1": 0}}, "end_offsets": {"raw": {"0": 200, "1": 10}},
        "offsets_behind_latest": 42, "emitted_ms": 123}
    # without the Redis sink nothing is applied
    assert batch_metrics("q", 7, STATS, BatchWatermark(None, None), max_after=None, elapsed_s=0.0,
                         counted=False, behind=None, emitted_ms=1)["applied_rows"] == 0


def test_totals_fold_batches_in() -> None:
    totals = Totals()
    first = {"input_rows": 10, "valid_rows": 9, "dlq_rows": 1, "late_rows": 0, "applied_rows": 9}
    totals.add(first, {"analyzed": 9, "dlq": 1})
    totals.add(first | {"late_rows": 2}, {"analyzed": 9, "dlq": 1, "summaries": 4})
    assert (totals.batches, totals.input_rows, totals.late_rows, totals.analyzed_written,
            totals.summaries_written) == (2, 20, 2, 18, 4)
    assert totals.last_batch["late_rows"] == 2
