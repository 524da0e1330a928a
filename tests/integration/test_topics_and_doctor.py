"""`kappa topics apply` is idempotent and reports drift; `kappa doctor` explains its choices."""

from __future__ import annotations

import json
import uuid

from confluent_kafka.admin import AdminClient, NewTopic


def test_apply_twice_creates_once_then_reports_unchanged(run_kappa, kafka_props):
    first = run_kappa("topics", "apply", "--json")
    assert first.returncode == 0, first.stderr
    second = run_kappa("topics", "apply", "--json")
    assert second.returncode == 0, second.stderr
    actions = {r["name"]: r["action"] for r in json.loads(second.stdout)}
    assert set(actions.values()) == {"unchanged"}
    assert "rsvps.raw" in actions and "platform.errors" in actions
    metadata = AdminClient(kafka_props).list_topics(timeout=10).topics
    assert len(metadata["rsvps.raw"].partitions) == 3
    assert len(metadata["rsvps.dlq"].partitions) == 1


def test_drift_is_reported_and_config_drift_fixed(run_kappa, kafka_props):
    name = f"drift.{uuid.uuid4().hex[:8]}"
    admin = AdminClient(kafka_props)
    admin.create_topics([NewTopic(name, 2, 1, config={"retention.ms": "1000"})])[name].result(10)
    env = {f"KAPPA_TOPICS__{name.replace('.', '_').upper()}__PARTITIONS": "4"}
    result = run_kappa("topics", "apply", "--json", env=env)
    assert result.returncode == 3, result.stderr
    row = next(r for r in json.loads(result.stdout) if r["name"] == name)
    assert row["action"] == "drift"
    assert any("partitions: declared 4, actual 2" in d for d in row["drift"])
    assert "retention.ms 1000 -> 604800000" in row["changes"]
    assert "error: drift" in result.stderr


def test_list_shows_offsets_and_retention(run_kappa):
    assert run_kappa("topics", "apply").returncode in (0, 3)
    result = run_kappa("topics", "list", "--json")
    assert result.returncode == 0, result.stderr
    raw = next(t for t in json.loads(result.stdout) if t["name"] == "rsvps.raw")
    assert len(raw["partitions"]) == 3 and raw["retention_ms"] == "604800000"


def test_doctor_explains_backends_and_versions(run_kappa):
    result = run_kappa("doctor", "--json")
    assert result.returncode == 0, result.stdout
    report = json.loads(result.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["kafka backend"]["detail"].startswith("python: no spark-sql-kafka-0-10 jar")
    assert checks["delta backend"]["detail"].startswith("deltalake: no delta-spark jar")
    assert '"17.' in checks["java"]["detail"]
    assert checks["python"]["detail"].startswith("3.11")
    assert checks["spark service"]["detail"].startswith("cold: no Spark service is up")
    assert report["versions"]["pyspark"] == "4.2.0"


def test_spark_factory_builds_a_local_session(spark):
    conf = spark.sparkContext.getConf()
    assert spark.version.startswith("4.2")
    assert conf.get("spark.master") == "local[2]"
    assert conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.sql.shuffle.partitions") == "2"
    assert spark.range(5).count() == 5
