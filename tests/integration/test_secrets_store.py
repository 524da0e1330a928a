"""Issue 48 item 3: secrets read from the Secrets Manager API (moto's server on loopback).

Each secret reaches the component that uses it (librdkafka properties, a Redis started with
``requirepass``, the serve and collector bearer-token guards); a secret that cannot be read is
one line naming its ARN and exit 2; no secret value is in any output of ``kappa -vv``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import httpx
import pytest
import redis
from confluent_kafka.admin import AdminClient

from jobs.collector.service import Settings
from jobs.config import secrets
from jobs.config.load import load_config
from jobs.errors import ConfigError
from jobs.pipelines.structure import keyed_object
from jobs.serve.service import auth_token
from jobs.stack.health import redis_healthy
from tests.conftest import AWS_REGION as REGION
from tests.conftest import AWS_TEST_ENV as AWS_ENV
from tests.conftest import KAPPA, REPO, free_port
from tests.integration.collector.support import CollectorProcess, listening_url, wait_ready

KAFKA_USER, KAFKA_PASSWORD = "streaming", "kafka-pw-Qx7!vR2#"
REDIS_PASSWORD = "redis-auth-Lm4%Zt9="
SERVE_TOKEN = "serve-token-Hb3+Wd8."
COLLECTOR_TOKEN = "collector-token-Nc6_Pf1-"
VALUES = (KAFKA_PASSWORD, REDIS_PASSWORD, SERVE_TOKEN, COLLECTOR_TOKEN)
READY_S = 60


@pytest.fixture(scope="module")
def store(aws_server: str) -> Iterator[dict[str, str]]:
    """The four secrets on moto's server; yields KAPPA_* variables naming them."""
    endpoint = aws_server
    with pytest.MonkeyPatch.context() as patch:
        for name, value in AWS_ENV.items():
            patch.setenv(name, value)
        client = boto3.client("secretsmanager", region_name=REGION, endpoint_url=endpoint)

        def create(name: str, value: str) -> str:
            return client.create_secret(Name=name, SecretString=value)["ARN"]

        yield {
            "KAPPA_SECRETS__PROVIDER": "aws", "KAPPA_SECRETS__ENDPOINT_URL": endpoint,
            "KAPPA_KAFKA__SASL_SECRET_ARN": create(
                "AmazonMSK_kappa_streaming",
                json.dumps({"username": KAFKA_USER, "password": KAFKA_PASSWORD})),
            "KAPPA_REDIS__AUTH_SECRET_ARN": create("kappa-redis-auth",
                                                   json.dumps({"password": REDIS_PASSWORD})),
            "KAPPA_SERVE__AUTH_TOKEN_SECRET_ARN": create("kappa-serve-token", SERVE_TOKEN),
            "KAPPA_COLLECTOR__AUTH_TOKEN_SECRET_ARN": create(
                "kappa-collector-token", json.dumps({"token": COLLECTOR_TOKEN})),
        }


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    secrets.clear_cache()
    yield
    secrets.clear_cache()


@pytest.fixture(scope="module")
def auth_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A Redis of this module requiring REDIS_PASSWORD (set here, not through kappa's config)."""
    folder = tmp_path_factory.mktemp("auth-redis")
    port = free_port()
    conf = folder / "redis.conf"
    conf.write_text(f'bind 127.0.0.1\nport {port}\nrequirepass "{REDIS_PASSWORD}"\nsave ""\n'
                    f"appendonly no\ndir {folder}\n")
    conf.chmod(0o600)
    process = subprocess.Popen(["redis-server", str(conf)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + READY_S
        while redis_healthy({"host": "127.0.0.1", "port": port, "password": REDIS_PASSWORD}):
            assert process.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(30)


def _sasl() -> dict[str, str]:
    return {"KAPPA_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "KAPPA_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512"}


def test_each_secret_reaches_the_component_that_uses_it(store, auth_redis):
    cfg = load_config("test", environ={**store, **_sasl(), "KAPPA_REDIS__PORT": str(auth_redis)})
    props = cfg.kafka.client_config()
    assert (props["sasl.username"], props["sasl.password"]) == (KAFKA_USER, KAFKA_PASSWORD)
    AdminClient({**props, "bootstrap.servers": f"127.0.0.1:{free_port()}"})  # librdkafka accepts them
    kwargs = cfg.redis.client_kwargs()
    assert kwargs["password"] == REDIS_PASSWORD
    assert redis.Redis(**kwargs).ping() is True
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(**{**kwargs, "password": None}).ping()
    token = auth_token(cfg, environ={})
    assert token is not None and token.get_secret_value() == SERVE_TOKEN
    assert Settings.from_config(cfg, keyed_object(None)).http.token == COLLECTOR_TOKEN
    shown = cfg.model_dump_json()
    assert not [value for value in VALUES if value in shown]


def test_the_environment_wins_and_no_call_is_made(store):
    cfg = load_config("test", environ={
        **store, **_sasl(), "KAPPA_KAFKA__SASL_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:1:secret:nope",
        "KAPPA_KAFKA_SASL_USERNAME": "local", "KAPPA_KAFKA_SASL_PASSWORD": "local-pw",
        "KAPPA_SERVE__AUTH_TOKEN_SECRET_ARN": "no-such-secret", "KAPPA_SERVE_TOKEN": "local-token"})
    assert cfg.kafka.client_config()["sasl.password"] == "local-pw"
    assert cfg.serve.auth_token is None
    assert cfg.redis.password is not None and cfg.redis.password.get_secret_value() == REDIS_PASSWORD


def test_a_kafka_login_secret_is_read_only_for_sasl_logins(store):
    cfg = load_config("test", environ={**store, "KAPPA_KAFKA__SASL_SECRET_ARN": "no-such-secret"})
    assert cfg.kafka.sasl_password is None and "sasl.password" not in cfg.kafka.client_config()


def test_a_secret_is_read_once_per_process(store):
    arn = store["KAPPA_REDIS__AUTH_SECRET_ARN"]
    first = load_config("test", environ=store)
    client = boto3.client("secretsmanager", region_name=REGION,
                          endpoint_url=store["KAPPA_SECRETS__ENDPOINT_URL"])
    client.put_secret_value(SecretId=arn, SecretString=json.dumps({"password": "rotated"}))
    try:
        assert load_config("test", environ=store).redis.password == first.redis.password  # cached
        secrets.clear_cache()
        rotated = load_config("test", environ=store).redis.password
        assert rotated is not None and rotated.get_secret_value() == "rotated"
    finally:
        client.put_secret_value(SecretId=arn, SecretString=json.dumps({"password": REDIS_PASSWORD}))


@pytest.mark.parametrize(("override", "expected"), [
    ({"KAPPA_REDIS__AUTH_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:gone-AbCdEf"},
     "redis.auth_secret_arn: cannot read secret arn:aws:secretsmanager:eu-west-1:123456789012:secret:"
     "gone-AbCdEf from Secrets Manager at {endpoint} (ResourceNotFoundException); check the ARN"),
    ({"KAPPA_SECRETS__ENDPOINT_URL": "http://127.0.0.1:{closed}", "KAPPA_SECRETS__TIMEOUT_S": "1"},
     "kafka.sasl_secret_arn: cannot read secret {kafka_arn} from Secrets Manager at "
     "http://127.0.0.1:{closed} (EndpointConnectionError); check the endpoint"),
])
def test_an_unreadable_secret_is_one_line_and_exit_2(store, override, expected):
    closed = free_port()
    fill = {"endpoint": store["KAPPA_SECRETS__ENDPOINT_URL"], "closed": closed,
            "kafka_arn": store["KAPPA_KAFKA__SASL_SECRET_ARN"]}
    env = {**os.environ, **AWS_ENV, **store, **_sasl(), "KAPPA_ENV": "test",
           **{name: value.format(**fill) for name, value in override.items()}}
    done = subprocess.run([*KAPPA, "config"], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert expected.format(**fill) in lines[0]
    with pytest.raises(ConfigError, match="cannot read secret"):
        load_config("test", environ={name: value for name, value in env.items() if name.startswith("KAPPA_")})


def test_no_secret_value_in_any_output_of_kappa_vv(store, auth_redis, stack, kappa_env, topic_factory,
                                                    tmp_path):
    base = {**os.environ, **AWS_ENV, **kappa_env, **store, "KAPPA_REDIS__PORT": str(auth_redis)}
    outputs = [_run(["-vv", "config"], {**base, **_sasl()}, tmp_path / "config.out"),
               _run(["-vv", "doctor"], {**base, **_sasl()}, tmp_path / "doctor.out")]
    topics = {"KAPPA_SERVE__ANALYZED_TOPIC": topic_factory(1),
              "KAPPA_SERVE__SUMMARIES_TOPIC": topic_factory(1), "KAPPA_SERVE__REQUIRE_AUTH": "true"}
    outputs.append(_guarded_serve({**base, **topics}, tmp_path / "serve.out"))
    outputs.append(_guarded_collector(base, topic_factory, tmp_path))
    texts = {path.name: path.read_text(errors="replace") for path in outputs}
    assert all("secret read key=" in text for text in texts.values()), texts  # -vv logs were on
    logs = {path.name: path.read_text(errors="replace") for path in Path(kappa_env["KAPPA_STACK__DATA_DIR"])
            .rglob("*.log")}
    leaks = [(name, value) for name, text in {**texts, **logs}.items() for value in VALUES
             if value in text]
    assert leaks == []


def _run(args: list[str], env: dict[str, str], output: Path) -> Path:
    with output.open("wb") as sink:
        subprocess.run([*KAPPA, *args], env=env, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT,
                       timeout=120, check=False)
    return output


def _guarded_serve(env: dict[str, str], output: Path) -> Path:
    port = free_port()
    with output.open("wb") as sink:
        process = subprocess.Popen([*KAPPA, "-vv", "serve", "--port", str(port)], env=env, cwd=REPO,
                                   stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: httpx.get(f"{url}/healthz", timeout=2).status_code == 200, process, output)
        assert httpx.get(f"{url}/metrics", timeout=5).status_code == 401
        wrong = {"Authorization": "Bearer wrong"}
        assert httpx.get(f"{url}/metrics", headers=wrong, timeout=5).status_code == 401
        right = {"Authorization": f"Bearer {SERVE_TOKEN}"}
        assert httpx.get(f"{url}/metrics", headers=right, timeout=5).status_code == 200
    finally:
        process.terminate()
        process.wait(30)
    return output


def _guarded_collector(env: dict[str, str], topic_factory: Callable[..., str], tmp_path: Path) -> Path:
    output = tmp_path / "collector.out"
    log_path = tmp_path / "collector" / "log.sqlite"
    full_env = {**env, "KAPPA_COLLECTOR__LOG_PATH": str(log_path)}
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [*KAPPA, "-vv", "collect", "--http", "--port", "0", "--topic", topic_factory(1),
             "--dlq-topic", topic_factory(1)], env=full_env, cwd=REPO, stdout=sink,
            stderr=subprocess.STDOUT)
    collector = CollectorProcess(process, "", log_path, output, full_env)
    try:
        collector.url = listening_url(collector)
        wait_ready(collector)
        body = b'{"a": 1}\n'
        assert httpx.post(f"{collector.url}/records", content=body, timeout=10).status_code == 401
        right = {"Authorization": f"Bearer {COLLECTOR_TOKEN}"}
        answer = httpx.post(f"{collector.url}/records", content=body, headers=right, timeout=10)
        assert answer.status_code != 401, answer.text
    finally:
        process.terminate()
        process.wait(30)
    return output


def _wait(ready: Callable[[], bool], process: subprocess.Popen, output: Path) -> None:
    deadline = time.monotonic() + READY_S
    while True:
        try:
            if ready():
                return
        except httpx.HTTPError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, output.read_text(errors="replace")
        time.sleep(0.2)
