"""The adapter turns keyword arguments into source options and routes to a backend."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobs.config.load import load_config
from jobs.errors import KafkaSourceError
from jobs.spark.kafka_io import _bound, _strategy, kafka_options


def test_bounds_become_the_jvm_option_names():
    assert _bound("starting", "earliest") == {"startingOffsets": "earliest"}
    assert _bound("ending", {"t": {0: 5, "1": -1}}) == {"endingOffsets": '{"t": {"0": 5, "1": -1}}'}
    moment = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    assert _bound("starting", moment) == {"startingTimestamp": "1767323045678"}
    with pytest.raises(KafkaSourceError, match="naive datetime"):
        _bound("starting", datetime(2026, 1, 2))  # noqa: DTZ001
    with pytest.raises(KafkaSourceError, match="expected 'earliest', 'latest'"):
        _bound("ending", 12)


def test_exactly_one_of_topics_or_pattern():
    assert _strategy(["a", "b"], None) == {"subscribe": "a,b"}
    assert _strategy("a", None) == {"subscribe": "a"}
    assert _strategy(None, "rsvps\\..*") == {"subscribePattern": "rsvps\\..*"}
    with pytest.raises(KafkaSourceError, match="exactly one of topics= or pattern="):
        _strategy("a", "b")


def test_config_supplies_bootstrap_and_security_per_backend():
    environ = {"KAPPA_KAFKA__BOOTSTRAP_SERVERS": "broker:9096",
               "KAPPA_KAFKA__SECURITY_PROTOCOL": "SASL_SSL", "KAPPA_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
               "KAPPA_KAFKA_SASL_USERNAME": "app", "KAPPA_KAFKA_SASL_PASSWORD": "s3cret"}
    cfg = load_config("test", environ=environ)
    python = kafka_options(cfg, "python")
    assert python["kafka.bootstrap.servers"] == "broker:9096"
    assert python["kafka.sasl.username"] == "app" and python["kafka.sasl.password"] == "s3cret"
    jvm = kafka_options(cfg, "jvm")
    assert "kafka.sasl.username" not in jvm
    assert jvm["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="app" '
        'password="s3cret";')


def test_jaas_string_escapes_quotes_and_backslashes():
    """Issue 18 item 9: a quote in a password must not end the JAAS option early."""
    environ = {"KAPPA_KAFKA__BOOTSTRAP_SERVERS": "broker:9096",
               "KAPPA_KAFKA__SECURITY_PROTOCOL": "SASL_SSL", "KAPPA_KAFKA__SASL_MECHANISM": "PLAIN",
               "KAPPA_KAFKA_SASL_USERNAME": 'a"b', "KAPPA_KAFKA_SASL_PASSWORD": 'p\\w";x="y'}
    jvm = kafka_options(load_config("test", environ=environ), "jvm")
    assert jvm["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="a\\"b" '
        'password="p\\\\w\\";x=\\"y";')
