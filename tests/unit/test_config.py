"""Config loading: merge order, env overrides, secrets, placeholders, one clear error."""

from __future__ import annotations

import json

import pytest

from jobs.config.load import load_config
from jobs.errors import ConfigError


def test_base_and_env_merge_with_env_var_overrides():
    cfg = load_config("test", environ={"KAPPA_KAFKA__BOOTSTRAP_SERVERS": "b1:9093,b2:9093",
                                       "KAPPA_TOPICS__RSVPS_RAW__PARTITIONS": "6"})
    assert cfg.env == "test"
    assert cfg.spark.ui_enabled is False  # from test.yaml
    assert cfg.spark.master == "local[2]"  # from base.yaml
    assert cfg.kafka.bootstrap_servers == "b1:9093,b2:9093"
    assert cfg.topics["rsvps.raw"].partitions == 6
    assert cfg.topics["rsvps.dlq"].partitions == 1


def test_config_is_frozen():
    cfg = load_config("test", environ={})
    with pytest.raises(ValueError, match="frozen"):
        cfg.kafka.bootstrap_servers = "x:1"


def test_every_bad_key_is_listed_in_one_error():
    with pytest.raises(ConfigError) as err:
        load_config("test", environ={"KAPPA_REDIS__PORT": "abc", "KAPPA_SPARK__SHUFFLE_PARTITIONS": "0",
                                     "KAPPA_NOPE__X": "1"})
    message = str(err.value)
    assert "redis.port" in message and "'abc'" in message
    assert "spark.shuffle_partitions" in message
    assert "KAPPA_NOPE__X" in message
    assert "3 problem(s)" in message
    assert err.value.exit_code == 2


def test_unknown_key_in_a_file_is_rejected(tmp_path):
    (tmp_path / "base.yaml").write_text("env: x\nkafka:\n  bootstrap_servers: h:1\n  bootstrap: typo\n")
    (tmp_path / "dev.yaml").write_text("env: dev\n")
    with pytest.raises(ConfigError, match=r"kafka\.bootstrap: Extra inputs are not permitted"):
        load_config("dev", environ={}, directory=tmp_path)


def test_broken_yaml_names_the_file_and_line(tmp_path):
    (tmp_path / "base.yaml").write_text("env: x\nkafka: [unclosed\n")
    (tmp_path / "dev.yaml").write_text("env: dev\n")
    with pytest.raises(ConfigError, match=r"base\.yaml line \d+: not valid YAML"):
        load_config("dev", environ={}, directory=tmp_path)


def test_unknown_env_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown environment 'staging2'.*'local'.*'prod'.*'test'"):
        load_config("staging2", environ={})


def test_secrets_only_from_environment_and_never_shown():
    cfg = load_config("test", environ={"KAPPA_KAFKA_SASL_PASSWORD": "hunter2",
                                       "KAPPA_REDIS_PASSWORD": "redis-pw"})
    assert cfg.kafka.client_config()["sasl.password"] == "hunter2"
    assert cfg.redis.client_kwargs()["password"] == "redis-pw"
    dumped = cfg.model_dump_json() + repr(cfg) + str(cfg)
    assert "hunter2" not in dumped and "redis-pw" not in dumped


def test_secret_in_a_file_is_refused(tmp_path):
    (tmp_path / "base.yaml").write_text("env: x\nkafka:\n  bootstrap_servers: h:1\n  sasl_password: oops\n")
    (tmp_path / "dev.yaml").write_text("env: dev\n")
    with pytest.raises(ConfigError, match="KAPPA_KAFKA_SASL_PASSWORD") as err:
        load_config("dev", environ={}, directory=tmp_path)
    assert "oops" not in str(err.value)


def test_prod_needs_terraform_outputs_then_loads(tmp_path):
    with pytest.raises(ConfigError, match=r"kafka\.bootstrap_servers <- kafka_bootstrap_servers"):
        load_config("prod", environ={})
    outputs = {name: {"value": value, "sensitive": False} for name, value in {
        "kafka_bootstrap_servers": "b-1.msk:9096,b-2.msk:9096",
        "kafka_sasl_secret_arn": "arn:aws:secretsmanager:eu-west-1:1:secret:AmazonMSK_kappa",
        "redis_host": "master.kappa.cache.amazonaws.com", "redis_port": 6379,
        "redis_auth_secret_arn": "arn:aws:secretsmanager:eu-west-1:1:secret:redis",
        "spark_application_id": "00abc", "spark_job_role_arn": "arn:aws:iam::1:role/spark",
        "spark_artifacts_uri": "s3://kappa-artifacts/jobs/", "lake_root": "s3://kappa-lake/delta",
        "checkpoint_root": "s3://kappa-lake/checkpoints", "airflow_dags_uri": "s3://kappa-dags/dags",
        "airflow_webserver_url": "https://mwaa.example"}.items()}
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    # prod reads its secrets from Secrets Manager (tests/integration/test_secrets_store.py);
    # variables in the environment win, so this loads without reaching AWS
    env_secrets = {"KAPPA_KAFKA_SASL_USERNAME": "streaming", "KAPPA_KAFKA_SASL_PASSWORD": "pw",
                   "KAPPA_REDIS_PASSWORD": "auth"}
    cfg = load_config("prod", environ={"KAPPA_TERRAFORM_OUTPUTS": str(path), **env_secrets})
    assert cfg.secrets.provider == "aws"
    assert cfg.kafka.bootstrap_servers == "b-1.msk:9096,b-2.msk:9096"
    assert cfg.kafka.security_protocol == "SASL_SSL"
    assert cfg.redis.port == 6379 and cfg.redis.tls is True
    assert cfg.lake.root == "s3://kappa-lake/delta"


def test_relative_paths_resolve_under_the_repository():
    cfg = load_config("local", environ={})
    assert cfg.stack.data_dir.is_absolute()
    assert cfg.lake.root.startswith("/") and cfg.lake.root.endswith("var/lake")


def test_empty_spark_master_is_refused():
    """Issue 18 item 8."""
    for value in ("", "   "):
        with pytest.raises(ConfigError, match=r"spark\.master: empty or not a Spark master") as err:
            load_config("test", environ={"KAPPA_SPARK__MASTER": value})
        assert "1 problem(s)" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("environ", "expected"), [
    ({"KAPPA_KAFKA__SECURITY_PROTOCOL": "SASL_SSL"},
     "kafka: security_protocol SASL_SSL needs kafka.sasl_mechanism"),
    ({"KAPPA_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAPPA_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
      "KAPPA_KAFKA_SASL_USERNAME": "app"},
     "kafka: security_protocol SASL_PLAINTEXT with SCRAM-SHA-512 needs credentials: set "
     "KAPPA_KAFKA_SASL_USERNAME and KAPPA_KAFKA_SASL_PASSWORD"),
])
def test_sasl_without_mechanism_or_credentials_is_refused(environ, expected):
    """Issue 18 item 8: caught at load time, not by a raw librdkafka error in doctor."""
    with pytest.raises(ConfigError, match="1 problem") as err:
        load_config("test", environ=environ)
    assert expected in str(err.value)


def test_sasl_with_credentials_or_secret_arn_loads():
    login = load_config("test", environ={
        "KAPPA_KAFKA__SECURITY_PROTOCOL": "SASL_SSL", "KAPPA_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
        "KAPPA_KAFKA_SASL_USERNAME": "app", "KAPPA_KAFKA_SASL_PASSWORD": "pw"})
    assert login.kafka.client_config()["sasl.mechanism"] == "SCRAM-SHA-512"
    arn = load_config("test", environ={
        "KAPPA_KAFKA__SECURITY_PROTOCOL": "SASL_SSL", "KAPPA_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
        "KAPPA_KAFKA__SASL_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:1:secret:AmazonMSK_x"})
    assert arn.kafka.sasl_secret_arn.endswith("AmazonMSK_x")


def test_every_librdkafka_secret_in_client_is_masked():
    """Issue 18 item 9: properties librdkafka flags sensitive never print in clear."""
    client = {"sasl.password": "pw-1", "ssl.key.password": "pw-2", "ssl.keystore.password": "pw-3",
              "sasl.oauthbearer.client.secret": "pw-4", "ssl.key.pem": "pw-5",
              "sasl.oauthbearer.config": "pw-6", "linger.ms": 5}
    cfg = load_config("test", environ={"KAPPA_KAFKA__CLIENT": json.dumps(client)})
    assert cfg.kafka.client_config()["ssl.key.password"] == "pw-2"  # clients still get them
    shown = json.loads(cfg.model_dump_json())["kafka"]["client"]
    assert shown == {"sasl.password": "**********", "ssl.key.password": "**********",
                     "ssl.keystore.password": "**********",
                     "sasl.oauthbearer.client.secret": "**********", "ssl.key.pem": "**********",
                     "sasl.oauthbearer.config": "**********", "linger.ms": 5}


def test_librdkafka_secret_in_a_conf_file_is_refused(tmp_path):
    """Issue 18 item 9: as for the named secrets, files may not hold them."""
    (tmp_path / "base.yaml").write_text(
        "env: x\nkafka:\n  bootstrap_servers: h:1\n  client:\n    sasl.password: oops1\n"
        "    ssl.keystore.password: oops2\n    ssl.key.location: /etc/kafka/client.key\n")
    (tmp_path / "dev.yaml").write_text("env: dev\n")
    with pytest.raises(ConfigError, match="2 problem") as err:
        load_config("dev", environ={}, directory=tmp_path)
    message = str(err.value)
    assert "kafka.client.sasl.password: secrets are never read from files" in message
    assert "kafka.client.ssl.keystore.password: secrets are never read from files" in message
    assert "oops" not in message and "ssl.key.location" not in message


def test_redis_tls_ca_file_reaches_the_client():
    """Issue 18 item 10: a real Redis over TLS, verified against a CA file."""
    cfg = load_config("test", environ={"KAPPA_REDIS__EMBEDDED": "false", "KAPPA_REDIS__TLS": "true",
                                       "KAPPA_REDIS__TLS_CA_FILE": "/etc/ssl/redis-ca.pem"})
    kwargs = cfg.redis.client_kwargs()
    assert kwargs["ssl"] is True and kwargs["ssl_ca_certs"] == "/etc/ssl/redis-ca.pem"
    with pytest.raises(ConfigError, match="redis: tls_ca_file is set but tls is false"):
        load_config("test", environ={"KAPPA_REDIS__EMBEDDED": "false",
                                     "KAPPA_REDIS__TLS_CA_FILE": "/etc/ssl/redis-ca.pem"})


STREAM_PIPELINE = """\
name: clicks
source: {topic: clicks.raw, key: id}
outputs:
  analyzed: {topic: clicks.analyzed}
  dlq: {topic: clicks.dlq}
  summaries: {topic: clicks.summaries}
streaming: {query_name: clicks-live, job: kappa-stream}
tables:
  bronze.clicks_raw: {topic: clicks.raw, quality_policy: quarantine}
  gold.clicks_daily: {gold: daily}
"""


def test_the_stream_pipelines_topics_query_and_tables_are_the_defaults(tmp_path):
    (tmp_path / "clicks").mkdir()
    (tmp_path / "clicks" / "pipeline.yaml").write_text(STREAM_PIPELINE)
    environ = {"KAPPA_PIPELINES_PATH": str(tmp_path), "KAPPA_PIPELINES__DEFAULT": "clicks"}
    cfg = load_config("test", environ=environ)
    s = cfg.streaming
    assert (s.query_name, s.source_topic, s.analyzed_topic, s.summaries_topic, s.dlq_topic) == (
        "clicks-live", "clicks.raw", "clicks.analyzed", "clicks.summaries", "clicks.dlq")
    assert (cfg.collector.topic, cfg.collector.dlq_topic) == ("clicks.raw", "clicks.dlq")
    assert {name: (t.topic, t.quality_policy) for name, t in cfg.loader.tables.items()} == {
        "bronze.clicks_raw": ("clicks.raw", "quarantine")}
    # a variable still wins over the pipeline's declaration
    moved = load_config("test", environ={**environ, "KAPPA_STREAMING__SOURCE_TOPIC": "other.raw"})
    assert (moved.streaming.source_topic, moved.streaming.analyzed_topic) == ("other.raw", "clicks.analyzed")


def test_an_engine_pipeline_as_the_default_gives_no_stream_topics():
    cfg = load_config("test", environ={"KAPPA_PIPELINES__DEFAULT": "cards"})
    assert cfg.streaming.source_topic == "events.raw" and cfg.loader.tables == {}
