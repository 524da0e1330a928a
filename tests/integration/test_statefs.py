"""Issue 48 items 1 and 5: the job's state files on S3 (moto's server on loopback) and on a local path.

Every test runs the same body twice: on a temporary folder and on ``s3://<bucket>/<prefix>`` of
the S3 API server. Spark's own checkpoint stays local in tests (no s3a jars here); what the job
keeps beside it goes through jobs/lake/statefs.py, proven here on both.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from jobs.errors import ConfigError
from jobs.kafka import dataloss
from jobs.kafka.dataloss import DataLoss
from jobs.kafka.options import parse_source_options
from jobs.kafka.stream import KafkaStreamReader
from jobs.lake import statefs
from jobs.lake.statefs import Location, ObjectPath, StateStoreError
from jobs.streaming.checkpoint import corrupt
from jobs.streaming.state import (
    CheckpointError,
    PendingApplyFile,
    QueryLock,
    check_fingerprint,
    checkpoint_path,
    effects_gone,
    last_committed,
    last_offsets,
    lock_holder,
)
from jobs.streaming.stream_time import StreamTimeLog
from tests.conftest import AWS_REGION, AWS_TEST_ENV

RACERS = 8
FINGERPRINT = {"format": "kappa-streaming-state/1", "source_topics": ["rsvps.raw"],
               "windows_ms": {"minute": 60000}, "sinks": ["kafka", "redis"]}


@pytest.fixture(scope="module")
def bucket(aws_server: str) -> Iterator[str]:
    """A bucket of this module on the S3 API server, boto3 (and the layer) pointed at the server."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in AWS_TEST_ENV.items():
            patch.setenv(name, value)
        patch.setenv("AWS_ENDPOINT_URL_S3", aws_server)
        name = f"kappa-state-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", region_name=AWS_REGION).create_bucket(
            Bucket=name, CreateBucketConfiguration={"LocationConstraint": AWS_REGION})
        yield name


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path: Path) -> Location:
    """A checkpoint root: a temporary folder, or a fresh prefix of the S3 bucket."""
    if request.param == "local":
        return tmp_path / "checkpoints"
    bucket = request.getfixturevalue("bucket")
    return statefs.location(f"s3://{bucket}/{uuid.uuid4().hex[:8]}/checkpoints")


def test_write_read_and_replace(root: Location) -> None:
    path = root / "q" / "kappa-state" / "stream-time.json"
    with pytest.raises(FileNotFoundError):
        statefs.read(path)
    statefs.write(path, b'{"v": 1}')
    assert statefs.read(path) == b'{"v": 1}'
    statefs.write(path, b'{"v": 2}')
    assert statefs.read(path) == b'{"v": 2}'
    assert statefs.modified(path) > 0


def test_create_if_absent_keeps_the_first_writer(root: Location) -> None:
    path = root / "q.fingerprint.json"
    assert statefs.create(path, b"first") is True
    assert statefs.create(path, b"second") is False
    assert statefs.read(path) == b"first"


def _race_to_create(path: Location) -> tuple[list[int], list[Exception]]:
    """RACERS threads create ``path`` at once, each with its own bytes: who won, what failed."""
    start = threading.Barrier(RACERS)
    won: list[int] = []
    errors: list[Exception] = []

    def race(n: int) -> None:
        start.wait()
        try:
            if statefs.create(path, f"writer-{n}".encode()):
                won.append(n)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return won, errors


def test_of_concurrent_creates_exactly_one_wins(root: Location) -> None:
    for round_ in range(3):
        path = root / f"initial-offsets-{round_}.json"
        won, errors = _race_to_create(path)
        assert errors == []
        assert len(won) == 1
        assert statefs.read(path) == f"writer-{won[0]}".encode()


def test_list_and_delete(root: Location) -> None:
    folder = root / "q"
    assert statefs.listdir(folder) == []
    for name in ("offsets/0", "offsets/1", "commits/0", "kappa-state/pending-apply.json"):
        statefs.write(folder / name, b"x")
    assert statefs.listdir(folder) == ["commits", "kappa-state", "offsets"]
    assert statefs.listdir(folder / "offsets") == ["0", "1"]
    statefs.delete(folder / "offsets" / "1")
    statefs.delete(folder / "offsets" / "1")   # gone already: nothing to do
    assert statefs.listdir(folder / "offsets") == ["0"]
    statefs.delete_tree(folder)
    assert statefs.listdir(folder) == []
    assert statefs.listdir(root) == []


def test_move_tree(root: Location) -> None:
    statefs.write(root / "q" / "offsets" / "0", b"v1")
    statefs.write(root / "q" / "kafka-py" / "initial-offsets.json", b"{}")
    statefs.move_tree(root / "q", root / "q.replaced-1")
    assert statefs.listdir(root) == ["q.replaced-1"]
    assert statefs.read(root / "q.replaced-1" / "offsets" / "0") == b"v1"
    assert statefs.listdir(root / "q.replaced-1" / "kafka-py") == ["initial-offsets.json"]


def test_the_job_state_files_go_through_the_layer(root: Location) -> None:
    checkpoint = checkpoint_path(str(root), "q")
    pending = PendingApplyFile(checkpoint)
    assert pending.read() is None
    pending.write({"batch_id": 4, "expected": [["rsvps.raw", 0, 10]]})
    assert pending.read() == {"batch_id": 4, "expected": [["rsvps.raw", 0, 10]]}
    pending.clear(3)   # another batch's: stays
    assert pending.expects_fence() is True
    pending.clear(4)
    assert pending.read() is None
    log = StreamTimeLog(checkpoint)
    log.record({("rsvps.raw", 0): (10, 1_700_000_000_000)})
    again = StreamTimeLog(checkpoint_path(str(root), "q"))   # another driver of the query
    assert again.points() == {("rsvps.raw", 0): {10: 1_700_000_000_000}}


def test_spark_logs_are_read_through_the_layer(root: Location) -> None:
    checkpoint = checkpoint_path(str(root), "q")
    assert last_offsets(checkpoint) is None and last_committed(checkpoint) is None
    statefs.write(checkpoint / "offsets" / "7", b'v1\n{"batchWatermarkMs":0}\n{"rsvps.raw":{"0":42}}\n')
    statefs.write(checkpoint / "commits" / "6", b'v1\n{"nextBatchWatermarkMs":0}\n')
    assert last_offsets(checkpoint) == (7, {"rsvps.raw": {"0": 42}})
    assert last_committed(checkpoint) == 6
    assert corrupt(checkpoint) is None
    assert effects_gone(checkpoint, fence_exists=False) is True
    statefs.write(checkpoint / "commits" / "7", b"v1\n{torn")
    assert "commits/7 is unreadable" in (corrupt(checkpoint) or "")


def test_fingerprint_first_writer_wins_and_a_changed_one_is_refused(root: Location) -> None:
    checkpoint = checkpoint_path(str(root), "q")
    other = FINGERPRINT | {"sinks": ["kafka"]}
    outcomes: list[str] = []
    start = threading.Barrier(2)

    def start_driver(expected: dict) -> None:
        start.wait()
        try:
            check_fingerprint(checkpoint, expected, "q")
            outcomes.append("started")
        except CheckpointError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=start_driver, args=(fp,)) for fp in (FINGERPRINT, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(o == "started" for o in outcomes) == [False, True]
    refused = next(o for o in outcomes if o != "started")
    assert "was built for a different query (sinks changed" in refused


def test_a_checkpoint_without_fingerprint_is_refused(root: Location) -> None:
    checkpoint = checkpoint_path(str(root), "q")
    statefs.write(checkpoint / "offsets" / "0", b"v1\n{}\n{}\n")
    with pytest.raises(CheckpointError, match="has no fingerprint"):
        check_fingerprint(checkpoint, FINGERPRINT, "q")


def test_the_kafka_source_keeps_its_first_initial_offsets(root: Location) -> None:
    path = root / "q" / "kafka-py" / "initial-offsets.json"
    statefs.create(path, b'{"rsvps.raw": {"0": 17}}')
    options = parse_source_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "rsvps.raw",
                                    "initialOffsetsFile": str(path)}, streaming=True)
    assert KafkaStreamReader(options).initialOffset() == {"rsvps.raw": {"0": 17}}


def test_the_data_loss_ledger(root: Location) -> None:
    ledger = str(root / "q" / "kafka-py" / "data-loss")
    assert dataloss.skipped_records(ledger) == 0
    loss = DataLoss("deleted", "rsvps.raw", 0, requested=10, earliest=14, skipped=4)
    dataloss.report([loss], fail=False, ledger_dir=ledger)
    dataloss.report([loss], fail=False, ledger_dir=ledger)   # a replayed batch: the same record
    assert dataloss.read_ledger(ledger) == [loss]
    assert dataloss.skipped_records(ledger) == 4


def test_locations(tmp_path: Path) -> None:
    assert checkpoint_path(str(tmp_path), "q") == tmp_path / "q"
    assert checkpoint_path(f"file://{tmp_path}", "q") == tmp_path / "q"
    remote = checkpoint_path("s3a://bucket/prefix/checkpoints/", "q")
    assert remote == ObjectPath("s3a", "bucket", "prefix/checkpoints/q")
    assert str(remote) == "s3a://bucket/prefix/checkpoints/q"
    assert str(remote.with_name("q.fingerprint.json")) == "s3a://bucket/prefix/checkpoints/q.fingerprint.json"
    with pytest.raises(ConfigError, match=r"not gs://; set lake.checkpoint_root"):
        statefs.location("gs://bucket/checkpoints")


def test_the_flock_of_a_checkpoint_on_s3_is_local(bucket: str) -> None:
    checkpoint = checkpoint_path(f"s3://{bucket}/{uuid.uuid4().hex[:8]}", "q")
    lock = QueryLock(checkpoint, "q")
    assert lock.path.is_absolute() and "s3:" not in str(lock.path)
    lock.acquire()
    try:
        assert lock_holder(checkpoint) is not None
    finally:
        lock.release()
    assert lock_holder(checkpoint) is None


def test_a_missing_bucket_is_one_clear_error(bucket: str) -> None:
    path = statefs.location(f"s3://{bucket}-missing/q/kappa-state/stream-time.json")
    with pytest.raises(StateStoreError, match=r"NoSuchBucket.*the bucket does not exist; create it or fix"):
        statefs.write(path, b"{}")
