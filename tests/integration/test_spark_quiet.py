"""What a Spark-using `kappa` command prints on stderr: no JVM start-up noise, real errors kept."""

from __future__ import annotations

import json
import socket
import subprocess
import uuid

import pytest

NOISE = ("WARNING: Using incubator modules", "Using Spark's default log4j profile",
         "Setting default log level to", "To adjust logging level use sc.setLogLevel",
         "could not bind on port", "NativeCodeLoader")


def _squat(port: int) -> socket.socket | None:
    """Hold 127.0.0.1:``port`` (None if something else already does)."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        return None
    sock.listen()
    return sock


@pytest.mark.slow
def test_a_spark_command_prints_none_of_the_jvms_start_up_noise(run_kappa, kafka_props, topic_factory,
                                                               tmp_path):
    from confluent_kafka import Producer

    topic = topic_factory(1, "quiet")
    producer = Producer(kafka_props)
    for index in range(3):
        producer.produce(topic, json.dumps({"rsvp_id": index}).encode(), key=str(index).encode())
    assert producer.flush(30) == 0
    squatter = _squat(4040)  # Spark's UI port busy, as when another Spark job runs
    try:
        result = run_kappa("stream", "run", "--mode", "replay", "--from", "earliest", "--to", "latest",
                           "--sinks", "redis", timeout=400, env={
                               "KAPPA_STREAMING__SOURCE_TOPIC": topic,
                               "KAPPA_STREAMING__REDIS_PREFIX": f"q{uuid.uuid4().hex[:6]}",
                               "KAPPA_LAKE__CHECKPOINT_ROOT": str(tmp_path / "checkpoints"),
                               "KAPPA_SPARK__UI_ENABLED": "true"})
    finally:
        if squatter is not None:
            squatter.close()
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "3 records read" in result.stdout, result.stdout
    noisy = [line for line in result.stderr.splitlines() if any(n in line for n in NOISE)]
    assert noisy == [], noisy


def test_the_filter_passes_every_other_line_on(capfd):
    from jobs.spark.session import stderr_filtered

    lines = ["WARNING: Using incubator modules: jdk.incubator.vector",
             "26/11/26 19:00:00 WARN Utils: Service 'SparkUI' could not bind on port 4040. "
             "Attempting port 4041.",
             "26/11/26 19:00:00 ERROR Executor: Exception in task 0.0 in stage 1.0",
             "Traceback (most recent call last):"]
    script = "; ".join(f"echo {json.dumps(line)} >&2" for line in lines)
    with stderr_filtered():
        child = subprocess.Popen(["sh", "-c", script])  # inherits fd 2, as the JVM does
    assert child.wait(30) == 0
    assert _read_until(capfd, len(lines) - 2) == lines[2:]


def _read_until(capfd, count: int, timeout_s: float = 10) -> list[str]:
    """The lines that reach stderr, once ``count`` did (the filter's thread passes them on)."""
    import time

    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen += capfd.readouterr().err.splitlines()
        if len(seen) >= count:
            break
        time.sleep(0.1)
    return seen


REREGISTER_RACE = ("BlockManager.reregister", '"idWithoutTopologyInfo" is null',
                   "Cannot find endpoint: spark://CoarseGrainedScheduler")


@pytest.mark.slow
def test_the_heartbeats_block_manager_reregistration_race_never_reaches_the_terminal(run_kappa, tmp_path):
    # Local Spark's executor heartbeat asks the block manager to re-register when the driver does not
    # know it yet; before it has an id (slow start-up) that fails with a NullPointerException, and a
    # re-registration in local mode always fails looking up CoarseGrainedScheduler. Heartbeats every
    # 10 ms (10 s by default) make the race certain at every start.
    result = run_kappa("batch", "run", "dlq_daily", "--from", "2026-01-01", "--to", "2026-01-02", timeout=300,
                       env={"KAPPA_LAKE__ROOT": str(tmp_path / "lake"),
                            "KAPPA_SPARK__CONF": json.dumps({"spark.executor.heartbeatInterval": "10ms"})})
    assert result.returncode == 0, result.stderr[-3000:]
    raced = [line for line in result.stderr.splitlines() if any(sign in line for sign in REREGISTER_RACE)]
    assert raced == [], result.stderr[-3000:]



NULL_ID = ('Cannot invoke "org.apache.spark.storage.BlockManagerId.executorId()" because '
           '"idWithoutTopologyInfo" is null')
NPE_INBOX = ("26/11/28 18:51:22 ERROR Inbox: Ignoring error",   # lines as the driver printed them, cut short
             f"java.lang.NullPointerException: {NULL_ID}",
             "\tat org.apache.spark.storage.BlockManagerMasterEndpoint.org$apache$spark$storage$"
             "BlockManagerMasterEndpoint$$register(BlockManagerMasterEndpoint.scala:696)",
             "\tat org.apache.spark.rpc.netty.Inbox.process(Inbox.scala:101)")
NPE_HEARTBEAT = ("26/11/28 18:51:22 WARN Executor: Issue communicating with driver in heartbeater",
                 "org.apache.spark.SparkException: Exception thrown in awaitResult: ",
                 "\tat org.apache.spark.storage.BlockManagerMaster.registerBlockManager(BlockManagerMaster"
                 ".scala:85)",
                 "\tat org.apache.spark.storage.BlockManager.reregister(BlockManager.scala:707)",
                 "\tat org.apache.spark.executor.Executor.reportHeartBeat(Executor.scala:1552)",
                 f"Caused by: java.lang.NullPointerException: {NULL_ID}",
                 "\t... 3 more")
TIMEOUT_HEARTBEAT = ("26/11/28 18:51:23 WARN Executor: Issue communicating with driver in heartbeater",
                     "org.apache.spark.rpc.RpcTimeoutException: Future timed out after [10 seconds].",
                     "\tat org.apache.spark.executor.Executor.reportHeartBeat(Executor.scala:1537)",
                     "Caused by: java.util.concurrent.TimeoutException: Future timed out after [10 seconds]",
                     "\t... 12 more")
OTHER_INBOX = ("26/11/28 18:51:24 ERROR Inbox: Ignoring error",
               'java.lang.NullPointerException: Cannot invoke "Object.toString()" because "name" is null',
               "\tat org.apache.spark.scheduler.OutputCommitCoordinator.handleAskPermissionToCommit("
               "OutputCommitCoordinator.scala:1)")


def test_the_filter_drops_the_reregistration_race_whole_and_keeps_every_other_trace(capfd, tmp_path):
    from jobs.spark.session import stderr_filtered

    kept = ["a Python worker line", *TIMEOUT_HEARTBEAT, *OTHER_INBOX]
    path = tmp_path / "stderr.txt"
    path.write_text("\n".join([*NPE_INBOX, kept[0], *NPE_HEARTBEAT, *kept[1:]]) + "\n")
    with stderr_filtered():
        child = subprocess.Popen(["sh", "-c", f"cat {path} >&2"])  # inherits fd 2, as the JVM does
    assert child.wait(30) == 0
    assert _read_until(capfd, len(kept)) == kept
