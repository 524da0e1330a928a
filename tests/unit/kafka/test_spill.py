"""The fetch spill's rules on a temporary folder (no Kafka): what a read serves, what is removed."""

from __future__ import annotations

import time

import pyarrow as pa

from jobs.kafka.arrow import arrow_schema
from jobs.kafka.spill import FetchSpill, spill_key

SCHEMA = arrow_schema(False)
KEY = spill_key("abc", "rsvps.raw", 1, include_headers=False)


def batch(offsets: list[int]) -> pa.RecordBatch:
    n = len(offsets)
    return pa.RecordBatch.from_arrays([
        pa.array([b"k"] * n, pa.binary()), pa.array([f"v{o}".encode() for o in offsets], pa.binary()),
        pa.array(["rsvps.raw"] * n), pa.array([1] * n, pa.int32()), pa.array(offsets, pa.int64()),
        pa.array([0] * n, SCHEMA.field("timestamp").type), pa.array([0] * n, pa.int32())], schema=SCHEMA)


def offsets_of(batches: list[pa.RecordBatch]) -> list[int]:
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_a_read_serves_the_records_of_its_range_and_says_where_it_got(tmp_path):
    spill = FetchSpill(tmp_path)
    assert spill.write(KEY, 10, iter([batch([10, 11, 12]), batch([14, 15])])) == 16  # 13: compacted
    served, reached = spill.read(KEY, 11, 15, max_rows=2)
    assert offsets_of(served) == [11, 12, 14] and reached == 15
    assert all(b.num_rows <= 2 for b in served)
    # 10 is not read yet: the file stays, though a read took its last record
    served, reached = spill.read(KEY, 15, 40, max_rows=100)
    assert offsets_of(served) == [15] and reached == 16
    assert len(list(tmp_path.glob("*.arrow"))) == 1
    served, reached = spill.read(KEY, 10, 11, max_rows=100)
    assert offsets_of(served) == [10] and reached == 11
    assert not list(tmp_path.iterdir()), "read to the last offset: the file and its marks are gone"


def test_no_file_covering_the_start_serves_nothing(tmp_path):
    spill = FetchSpill(tmp_path)
    spill.write(KEY, 10, [batch([10, 11])])
    assert spill.read(KEY, 9, 20, max_rows=100) == ([], 9)  # starts before the file
    assert spill.read(KEY, 12, 20, max_rows=100) == ([], 12)  # starts at its end
    other = spill_key("abc", "rsvps.raw", 2, include_headers=False)
    assert spill.read(other, 10, 20, max_rows=100) == ([], 10)  # another partition


def spans(folder) -> list[str]:
    return sorted(p.name.split("~", 3)[-1] for p in folder.glob("*.arrow"))


def test_the_pieces_of_a_partition_read_in_any_order_each_find_the_file(tmp_path):
    """One micro-batch's two tasks read [20, 30) and [30, 40) of one spilled span, later piece first."""
    spill = FetchSpill(tmp_path)
    spill.write(KEY, 20, [batch(list(range(20, 40)))])
    served, reached = spill.read(KEY, 30, 40, max_rows=100)
    assert offsets_of(served) == list(range(30, 40)) and reached == 40
    spill.write(KEY, 40, [batch([40, 41])])  # the later piece's reader spilled what lay past its end
    assert spans(tmp_path) == ["20~40.arrow", "40~42.arrow"]
    served, reached = spill.read(KEY, 20, 30, max_rows=100)
    assert offsets_of(served) == list(range(20, 30)) and reached == 30
    assert spans(tmp_path) == ["40~42.arrow"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{KEY}~40~42.arrow"]


def test_a_span_written_again_starts_with_no_marks(tmp_path):
    spill = FetchSpill(tmp_path)
    spill.write(KEY, 10, [batch([10, 11, 12])])
    spill.read(KEY, 11, 13, max_rows=100)  # [10, 11) not read: the file stays, marked
    spill.write(KEY, 10, [batch([10, 11, 12])])  # a replay from 10 fetched and spilled it again
    spill.read(KEY, 10, 11, max_rows=100)
    assert spans(tmp_path) == ["10~13.arrow"], "the earlier file's mark does not count for this one"
    spill.read(KEY, 11, 13, max_rows=100)
    assert not list(tmp_path.iterdir())


def test_files_expire_and_the_folder_stays_within_its_budget(tmp_path):
    one = batch(list(range(100)))
    FetchSpill(tmp_path / "probe").write(KEY, 0, [one])
    size = next((tmp_path / "probe").glob("*.arrow")).stat().st_size
    spill = FetchSpill(tmp_path, max_bytes=int(size * 2.5))
    for part in range(3):
        spill.write(spill_key("abc", "t", part, False), 0, [one])
        time.sleep(0.01)
    assert len(list(tmp_path.glob("*.arrow"))) == 2  # the oldest went
    assert spill.read(spill_key("abc", "t", 0, False), 0, 100, 100) == ([], 0)
    assert spill.write(KEY, 7, iter([])) is None  # nothing to spill: no file, no temporary left
    assert not list(tmp_path.glob(f"{KEY}*")) and not list(tmp_path.glob(".tmp-*"))
    later = FetchSpill(tmp_path, ttl_s=60, clock=lambda: time.time() + 61)
    assert later.read(spill_key("abc", "t", 2, False), 0, 100, 100) == ([], 0)
    assert not list(tmp_path.glob("*.arrow"))
