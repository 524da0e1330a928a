"""Secret-store settings that need no server.

The reads themselves: tests/integration/test_secrets_store.py.
"""

from __future__ import annotations

import pytest

from jobs.config.load import load_config
from jobs.errors import ConfigError
from jobs.spark.submit import secret_variable

ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kappa-redis-auth-AbCdEf"


def test_with_provider_env_no_arn_is_read():
    cfg = load_config("test", environ={"KAPPA_REDIS__AUTH_SECRET_ARN": ARN,
                                       "KAPPA_SERVE__AUTH_TOKEN_SECRET_ARN": ARN})
    assert cfg.secrets.provider == "env"
    assert cfg.redis.password is None and cfg.serve.auth_token is None


@pytest.mark.parametrize("section", ["serve", "collector"])
def test_a_token_in_a_file_is_refused(tmp_path, section):
    (tmp_path / "base.yaml").write_text(
        f"env: x\nkafka:\n  bootstrap_servers: h:1\n{section}:\n  auth_token: oops\n")
    (tmp_path / "dev.yaml").write_text("env: dev\n")
    refused = rf"{section}\.auth_token: secrets are never read from files"
    with pytest.raises(ConfigError, match=refused) as err:
        load_config("dev", environ={}, directory=tmp_path)
    assert "oops" not in str(err.value)


def test_a_store_token_is_masked_when_shown():
    cfg = load_config("test", environ={"KAPPA_SERVE__AUTH_TOKEN": "tok-123"})
    assert "tok-123" not in cfg.model_dump_json() and "tok-123" not in repr(cfg)


def test_secret_references_reach_a_cluster_driver_but_secrets_do_not():
    assert not secret_variable("KAPPA_KAFKA__SASL_SECRET_ARN")
    assert not secret_variable("KAPPA_SECRETS__ENDPOINT_URL")
    assert not secret_variable("KAPPA_SERVE__AUTH_TOKEN_ENV")
    assert secret_variable("KAPPA_KAFKA_SASL_PASSWORD")
    assert secret_variable("KAPPA_SERVE__AUTH_TOKEN")
    assert secret_variable("KAPPA_COLLECTOR_TOKEN")
