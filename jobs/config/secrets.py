"""Secrets from AWS Secrets Manager, by the ARNs (or names) the config's ``*_secret_arn`` keys hold.

:func:`with_secrets` runs at the end of :func:`jobs.config.load.load_config` when
``secrets.provider`` is ``aws``: each secret the environment does not already give is read once
per process (cached), parsed, and put into the config as a ``SecretStr``. Values are never logged,
printed or put in an exception; a read that fails raises one :class:`ConfigError` line naming the
key, the ARN and what to do (exit 2 from the CLI). With ``provider: env`` nothing is read here.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from pydantic import SecretStr

from jobs.config.models import KafkaConfig, KappaConfig, SecretsConfig
from jobs.errors import ConfigError

logger = logging.getLogger(__name__)

_CACHE: dict[tuple[str | None, str | None, str], str] = {}
_LOCK = threading.Lock()
_ARN_PARTS = 6  # arn:aws:secretsmanager:<region>:<account>:secret:<name>
_FIX = {
    "AccessDeniedException": "grant the job's role secretsmanager:GetSecretValue on this ARN (and "
                             "kms:Decrypt on its key), or set the value in the environment",
    "ResourceNotFoundException": "check the ARN (terraform output) and the region (secrets.region), "
                                 "or set the value in the environment",
    "DecryptionFailure": "grant the job's role kms:Decrypt on the secret's KMS key",
    "KMSAccessDeniedException": "grant the job's role kms:Decrypt on the secret's KMS key",
    "InvalidRequestException": "the secret is scheduled for deletion or disabled; restore it "
                               "(aws secretsmanager restore-secret) or point the key at another",
}


def with_secrets(config: KappaConfig, environ: Mapping[str, str]) -> KappaConfig:
    """Return ``config`` with every store-held secret the environment does not set filled in."""
    store = config.secrets
    if store.provider != "aws":
        return config
    kafka, redis, serve, collector = config.kafka, config.redis, config.serve, config.collector
    updates: dict[str, Any] = {}
    kafka_arn = kafka.sasl_secret_arn
    if kafka_arn and _logs_in(kafka) and (kafka.sasl_username is None or kafka.sasl_password is None):
        login = _fields(store, "kafka.sasl_secret_arn", kafka_arn, ("username", "password"))
        updates["kafka"] = kafka.model_copy(update={
            "sasl_username": kafka.sasl_username or SecretStr(login["username"]),
            "sasl_password": kafka.sasl_password or SecretStr(login["password"])})
    if redis.auth_secret_arn and redis.password is None:
        password = _single(store, "redis.auth_secret_arn", redis.auth_secret_arn, "password")
        updates["redis"] = redis.model_copy(update={"password": SecretStr(password)})
    for name, section in (("serve", serve), ("collector", collector)):
        arn = section.auth_token_secret_arn
        if arn and section.auth_token is None and not environ.get(section.auth_token_env):
            token = _single(store, f"{name}.auth_token_secret_arn", arn, "token")
            updates[name] = section.model_copy(update={"auth_token": SecretStr(token)})
    return config.model_copy(update=updates) if updates else config


def _logs_in(kafka: KafkaConfig) -> bool:
    """Whether Kafka clients log in with a username and password (SASL PLAIN or SCRAM)."""
    return kafka.security_protocol.startswith("SASL_") and kafka.sasl_mechanism not in (None, "OAUTHBEARER")


def clear_cache() -> None:
    """Forget every secret read by this process (the next load reads the store again)."""
    with _LOCK:
        _CACHE.clear()


def _single(store: SecretsConfig, key: str, arn: str, field: str) -> str:
    """A secret holding one value: a plain string, or JSON with ``field``."""
    text = _read(store, key, arn)
    parsed = _json_object(text)
    if parsed is None:
        if not text.strip():
            raise ConfigError(f"{key}: secret {arn} is empty; put the value in it "
                              f"(plain text or JSON {{\"{field}\": ...}})")
        return text
    return _fields(store, key, arn, (field,), parsed)[field]


def _fields(store: SecretsConfig, key: str, arn: str, fields: tuple[str, ...],
            parsed: dict[str, Any] | None = None) -> dict[str, str]:
    """The named string fields of a JSON secret (the MSK SCRAM shape: username, password)."""
    if parsed is None:
        parsed = _json_object(_read(store, key, arn))
    missing = [name for name in fields
               if parsed is None or not isinstance(parsed.get(name), str) or not parsed[name]]
    if parsed is None or missing:
        wanted = ", ".join(f'"{name}": ...' for name in fields)
        found = "not a JSON object" if parsed is None else f"no non-empty string {missing}"
        raise ConfigError(f"{key}: secret {arn} has {found}; store it as JSON {{{wanted}}}")
    return {name: parsed[name] for name in fields}


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _read(store: SecretsConfig, key: str, arn: str) -> str:
    """The SecretString of ``arn``, from this process's cache or the Secrets Manager API."""
    region = store.region or _arn_region(arn)
    cache_key = (store.endpoint_url, region, arn)
    with _LOCK:
        if cache_key in _CACHE:
            logger.debug("secret cached key=%s arn=%s", key, arn)
            return _CACHE[cache_key]
    text = _get_secret_string(store, region, key, arn)
    with _LOCK:
        _CACHE[cache_key] = text
    logger.info("secret read key=%s arn=%s", key, arn)
    return text


def _get_secret_string(store: SecretsConfig, region: str | None, key: str, arn: str) -> str:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

    _quiet_botocore()
    where = f"{key}: cannot read secret {arn} from Secrets Manager"
    if store.endpoint_url:
        where += f" at {store.endpoint_url}"
    try:
        client = boto3.session.Session().client(
            "secretsmanager", region_name=region, endpoint_url=store.endpoint_url,
            config=Config(connect_timeout=store.timeout_s, read_timeout=store.timeout_s,
                          retries={"max_attempts": 2, "mode": "standard"}))
        answer = client.get_secret_value(SecretId=arn)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "error")
        fix = _FIX.get(code, "check the role's secretsmanager:GetSecretValue permission on this ARN")
        raise ConfigError(f"{where} ({code}); {fix}") from None
    except NoRegionError:
        raise ConfigError(f"{where} (no region); set secrets.region (KAPPA_SECRETS__REGION) or "
                          "AWS_REGION, or give a full ARN") from None
    except NoCredentialsError:
        raise ConfigError(f"{where} (no AWS credentials); run with a role (instance profile, EMR job "
                          "role, IRSA) or AWS_PROFILE, or set the value in the environment") from None
    except BotoCoreError as exc:
        raise ConfigError(f"{where} ({type(exc).__name__}); check the endpoint and the network "
                          "(a VPC endpoint for secretsmanager), or set the value in the "
                          "environment") from None
    text = answer.get("SecretString")
    if not isinstance(text, str):
        raise ConfigError(f"{key}: secret {arn} holds binary data, not a string; store the value "
                          "as SecretString")
    return text


def _arn_region(arn: str) -> str | None:
    parts = arn.split(":")
    if len(parts) > _ARN_PARTS and parts[0] == "arn" and parts[3]:
        return parts[3]
    return None


def _quiet_botocore() -> None:
    """Botocore logs response bodies (the secret) at DEBUG: keep its loggers at WARNING or above.

    Set on the parent loggers, so ``-vv`` (root at DEBUG) cannot reach ``botocore.parsers``.
    """
    for name in ("botocore", "boto3"):
        quiet = logging.getLogger(name)
        if quiet.level < logging.WARNING:
            quiet.setLevel(logging.WARNING)
