"""Issue 48 item 5: the Kafka source's initial offsets on S3 (moto's server), written in Spark's planner.

The ``initialOffsetsFile`` is read and created in the Python process Spark's JVM starts for each
streaming query's source, so the queries run in a process of their own whose JVM and workers
carry the S3 endpoint. Spark's own checkpoint stays local (no s3a jars here): the second query,
with a new local checkpoint, stands for a driver on another host that shares only the S3 location.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import boto3

from jobs.lake import statefs
from tests.conftest import AWS_REGION, AWS_TEST_ENV, REPO

RUN = """
import json, sys
from jobs.config.load import load_config
from jobs.spark.kafka_io import read_kafka
from jobs.spark.session import build_spark

topic, initial, *checkpoints = sys.argv[1:]
cfg = load_config()
spark = build_spark(cfg, app_name="kappa-test-initial-offsets")
for checkpoint in checkpoints:
    sys.stdin.readline()   # the test produced what this query should (or should not) read
    rows = []
    df = read_kafka(spark, cfg, topics=topic, starting="latest", stream=True,
                    options={"initialOffsetsFile": initial})
    query = (df.writeStream.trigger(availableNow=True).option("checkpointLocation", checkpoint)
             .foreachBatch(lambda batch, _: rows.extend(
                 (r.partition, r.offset) for r in batch.select("partition", "offset").collect()))
             .start())
    query.awaitTermination(120)
    print("rows", json.dumps(sorted(rows)), flush=True)
spark.stop()
"""


def _next_run(driver: subprocess.Popen, log: Path) -> list[list[int]]:
    """Let the driver run its next query; the (partition, offset) pairs it read."""
    assert driver.stdin is not None and driver.stdout is not None
    driver.stdin.write("go\n")
    driver.stdin.flush()
    for line in driver.stdout:
        if line.startswith("rows "):
            return json.loads(line.removeprefix("rows "))
    raise AssertionError(f"the driver stopped: {log.read_text()[-3000:]}")


def test_a_driver_elsewhere_starts_where_the_first_resolved_latest(stack, kappa_env, aws_server,
                                                                   topic_factory, produce, tmp_path,
                                                                   monkeypatch):
    env = {**os.environ, **kappa_env, **AWS_TEST_ENV, "AWS_ENDPOINT_URL_S3": aws_server}
    bucket = f"kappa-ckpt-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", region_name=AWS_REGION, endpoint_url=aws_server,
                 aws_access_key_id="testing", aws_secret_access_key="testing").create_bucket(
        Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": AWS_REGION})
    initial = f"s3://{bucket}/checkpoints/q/kafka-py/initial-offsets.json"
    topic = topic_factory()
    produce(topic, 9)
    log = tmp_path / "driver.log"
    with log.open("w") as stderr:
        driver = subprocess.Popen([sys.executable, "-c", RUN, topic, initial, str(tmp_path / "host-a" / "q"),
                                   str(tmp_path / "host-b" / "q")], env=env, cwd=REPO, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
    try:
        assert _next_run(driver, log) == []
        new = produce(topic, 6, start=9)
        # host B: no local checkpoint, "latest" is now after the new records; the file on S3 wins
        assert _next_run(driver, log) == sorted([r.partition, r.offset] for r in new)
        assert driver.wait(timeout=120) == 0
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    for name, value in (AWS_TEST_ENV | {"AWS_ENDPOINT_URL_S3": aws_server}).items():
        monkeypatch.setenv(name, value)
    assert json.loads(statefs.read(statefs.location(initial))) == {topic: {"0": 3, "1": 3, "2": 3}}
