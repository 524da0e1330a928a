"""Issue 18 item 10: the embedded Redis requires the configured password; doctor checks AUTH."""

from __future__ import annotations

import json
import os
import stat

import pytest
import redis

from jobs.config.load import load_config
from jobs.stack.embedded import EmbeddedStack
from jobs.stack.health import redis_healthy
from tests.conftest import free_port

PASSWORD = 'pw "with" quotes\\and a backslash'


def test_embedded_redis_starts_with_requirepass(tmp_path, stack):
    cfg = load_config("test", environ={"KAPPA_REDIS_PASSWORD": PASSWORD}, overrides={
        "kafka.embedded": False, "kafka.bootstrap_servers": stack.kafka.bootstrap_servers,
        "redis.port": free_port(), "stack.data_dir": str(tmp_path / "stack")})
    private = EmbeddedStack(cfg)  # only its Redis: Kafka is the session's, marked external
    private.up(progress=lambda line: None)
    try:
        kwargs = cfg.redis.client_kwargs()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(**{**kwargs, "password": None}).ping()
        assert redis.Redis(**kwargs).ping() is True
        assert redis_healthy(kwargs) is None
        pid = next(row.pid for row in private.status() if row.name == "redis")
        assert PASSWORD not in open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
        conf = tmp_path / "stack" / "redis" / "kappa-redis.conf"
        assert stat.S_IMODE(os.stat(conf).st_mode) == 0o600
    finally:
        private.down(progress=lambda line: None)


def test_doctor_fails_when_redis_answers_without_the_configured_password(kappa_env, stack):
    from jobs.doctor import run_doctor

    cfg = load_config("test", environ={**kappa_env, "KAPPA_REDIS_PASSWORD": "set-but-not-required"})
    report = run_doctor(cfg)
    checks = {check["name"]: check for check in report["checks"]}
    assert checks["redis"]["ok"] is False
    assert "answers without a password although KAPPA_REDIS_PASSWORD is set" in checks["redis"]["detail"]
    assert "set-but-not-required" not in json.dumps(report)
