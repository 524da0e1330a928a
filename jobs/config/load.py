"""One frozen, validated configuration object per run.

Sources, later ones winning: ``conf/base.yaml``, ``conf/<env>.yaml`` (``KAPPA_ENV``, default
``local``), ``${terraform:NAME}`` placeholders resolved from ``KAPPA_TERRAFORM_OUTPUTS``,
``KAPPA_<SECTION>__<KEY>`` environment variables, then explicit ``overrides``. Secrets are
never read from files: they come from the environment (``SECRET_ENV``, the serve and collector
``auth_token_env`` variables) or, with ``secrets.provider: aws``, from AWS Secrets Manager by the
``*_secret_arn`` keys (:mod:`jobs.config.secrets`; the environment wins). They are ``SecretStr``:
never printed or logged.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from jobs.config.models import (
    AirflowConfig,
    CollectorConfig,
    KafkaConfig,
    KappaConfig,
    LakeConfig,
    LoaderConfig,
    RedisConfig,
    ServeConfig,
    SparkConfig,
    StackConfig,
    StreamingConfig,
    TopicSpec,
    secret_client_prop,
)
from jobs.config.paths import PROJECT_ROOT, SPEC_FILE, search_paths
from jobs.config.secrets import with_secrets
from jobs.errors import ConfigError

__all__ = [
    "AirflowConfig", "CollectorConfig", "KafkaConfig", "KappaConfig", "LakeConfig",
    "LoaderConfig", "RedisConfig", "ServeConfig", "SparkConfig", "StackConfig", "StreamingConfig",
    "TopicSpec", "load_config",
]

DEFAULT_ENV = "local"
ENV_PREFIX = "KAPPA_"
SECRET_ENV = {
    ("kafka", "sasl_username"): "KAPPA_KAFKA_SASL_USERNAME",
    ("kafka", "sasl_password"): "KAPPA_KAFKA_SASL_PASSWORD",
    ("redis", "password"): "KAPPA_REDIS_PASSWORD",
}
TOKEN_SECTIONS = ("serve", "collector")  # their auth_token: from auth_token_env or the store
_PLACEHOLDER = re.compile(r"^\$\{terraform:([A-Za-z0-9_]+)\}$")


def conf_dir() -> Path:
    """The folder holding base.yaml and <env>.yaml (``KAPPA_CONF_DIR`` overrides)."""
    return Path(os.environ.get("KAPPA_CONF_DIR", PROJECT_ROOT / "conf"))


def load_config(
    env: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    directory: Path | None = None,
) -> KappaConfig:
    """Load, merge and validate the configuration; raise ConfigError listing every problem.

    Args:
        env: environment name; default ``KAPPA_ENV`` or ``local``.
        overrides: dotted keys (``"kafka.bootstrap_servers"``) applied last.
        environ: environment variables to read (default ``os.environ``).
        directory: the conf folder (default :func:`conf_dir`).
    """
    environ = os.environ if environ is None else environ
    directory = directory or conf_dir()
    env = env or environ.get("KAPPA_ENV") or DEFAULT_ENV
    env_file = directory / f"{env}.yaml"
    if not env_file.is_file():
        known = sorted(p.stem for p in directory.glob("*.yaml") if p.stem != "base")
        raise ConfigError(f"unknown environment {env!r}: no {env_file}; choose one of {known}")
    base, for_env = _read_yaml(directory / "base.yaml"), _read_yaml(env_file)
    probe = copy.deepcopy(_deep_merge(base, for_env))   # which pipeline is the default, as every layer says
    _apply_env_overrides(probe, environ, [])
    for dotted, value in (overrides or {}).items():
        _set_dotted(probe, dotted.split("."), value)
    default = (probe.get("pipelines") or {}).get("default")
    raw = _deep_merge(_deep_merge(_stream_pipeline_layer(str(default or ""), environ), base), for_env)
    problems = _reject_secrets_in_files(raw)
    raw = _resolve_placeholders(raw, environ, problems)
    _apply_env_overrides(raw, environ, problems)
    for dotted, value in (overrides or {}).items():
        _set_dotted(raw, dotted.split("."), value)
    for (section, key), var in SECRET_ENV.items():
        if environ.get(var):
            raw.setdefault(section, {})[key] = environ[var]
    _report_unresolved(raw, problems)
    try:
        config = KappaConfig.model_validate(raw)
    except ValidationError as exc:
        problems.extend(_describe(exc))
    if problems:
        raise ConfigError(_summary(env, problems))
    return with_secrets(_absolutize(config), environ)


def _stream_pipeline_layer(name: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """What pipeline ``name``'s ``pipeline.yaml`` gives the config when ``kappa stream`` runs it.

    A pipeline with ``streaming.job: kappa-stream`` declares its topics, query, params and topic-fed
    tables once; they are the defaults of ``streaming`` (query, topics, ``params``), ``collector``
    (the topic it writes and its dead letters) and ``loader.tables``, under ``base.yaml``, the environment's
    file, the variables and the overrides (the default pipeline: ``pipelines.default``). Another
    pipeline, none, or an unreadable ``pipeline.yaml`` gives nothing (``kappa pipelines validate``
    names the problem).
    """
    found = [root / name / SPEC_FILE for root in search_paths(dict(environ)) if name]
    found = [path for path in found if path.is_file()]
    try:
        spec = yaml.safe_load(found[0].read_text(encoding="utf-8")) if found else None
        if not isinstance(spec, dict) or (spec.get("streaming") or {}).get("job") != "kappa-stream":
            return {}
        source, outputs = spec["source"]["topic"], spec["outputs"]
        streaming = {"source_topic": source, "analyzed_topic": outputs["analyzed"]["topic"],
                     "summaries_topic": outputs["summaries"]["topic"], "dlq_topic": outputs["dlq"]["topic"]}
        if isinstance(spec.get("params"), dict):
            streaming["params"] = spec["params"]
        if spec["streaming"].get("query_name"):
            streaming["query_name"] = spec["streaming"]["query_name"]
        tables = {table: {key: value for key, value in entry.items() if key in ("topic", "quality_policy")}
                  for table, entry in (spec.get("tables") or {}).items()
                  if isinstance(entry, dict) and "topic" in entry}
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return {}
    return {"streaming": streaming, "collector": {"topic": source, "dlq_topic": streaming["dlq_topic"]},
            "loader": {"tables": tables}}


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"missing config file {path}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}{where}: not valid YAML ({reason}); fix the file") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections, found {type(data).__name__}")
    return data


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _reject_secrets_in_files(raw: dict[str, Any]) -> list[str]:
    problems = [
        f"{section}.{key}: secrets are never read from files; set {var} in the environment"
        for (section, key), var in SECRET_ENV.items()
        if isinstance(raw.get(section), dict) and key in raw[section]
    ]
    problems.extend(
        f"{section}.auth_token: secrets are never read from files; set the variable named by "
        f"{section}.auth_token_env, or {section}.auth_token_secret_arn"
        for section in TOKEN_SECTIONS
        if isinstance(raw.get(section), dict) and "auth_token" in raw[section])
    kafka = raw.get("kafka")
    client = kafka.get("client") if isinstance(kafka, dict) else None
    for prop in sorted(client) if isinstance(client, dict) else []:
        if secret_client_prop(prop):
            problems.append(
                f"kafka.client.{prop}: secrets are never read from files; set it in the "
                "environment (KAPPA_KAFKA__CLIENT as JSON, or the named KAPPA_KAFKA_SASL_* variables)")
    return problems


def _resolve_placeholders(
    raw: dict[str, Any], environ: Mapping[str, str], problems: list[str]
) -> dict[str, Any]:
    outputs_file = environ.get("KAPPA_TERRAFORM_OUTPUTS")
    outputs: dict[str, Any] = {}
    if outputs_file:
        try:
            outputs = {k: v.get("value") for k, v in json.loads(Path(outputs_file).read_text()).items()}
        except (OSError, ValueError, AttributeError) as exc:
            problems.append(f"KAPPA_TERRAFORM_OUTPUTS={outputs_file}: unreadable ({exc})")

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {key: walk(value) for key, value in node.items()}
        match = _PLACEHOLDER.match(node) if isinstance(node, str) else None
        if match and match.group(1) in outputs:
            return outputs[match.group(1)]
        return node

    return walk(raw)


def _report_unresolved(raw: dict[str, Any], problems: list[str]) -> None:
    missing: list[str] = []

    def walk(node: dict[str, Any], path: str) -> None:
        for key, value in list(node.items()):
            match = _PLACEHOLDER.match(value) if isinstance(value, str) else None
            if match:
                missing.append(f"{path}{key} <- {match.group(1)}")
                del node[key]
            elif isinstance(value, dict):
                walk(value, f"{path}{key}.")

    walk(raw, "")
    if missing:
        problems.append(
            f"{len(missing)} key(s) wait for Terraform outputs ({', '.join(missing)}): run "
            "`terraform output -json > outputs.json` and set KAPPA_TERRAFORM_OUTPUTS=outputs.json, "
            "or set each key as KAPPA_<SECTION>__<KEY>"
        )


def _apply_env_overrides(raw: dict[str, Any], environ: Mapping[str, str], problems: list[str]) -> None:
    for name, text in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX):].split("__")]
        if parts[0] == "topics" and len(parts) > 1:
            parts[1] = parts[1].replace("_", ".")
        try:
            value = yaml.safe_load(text) if text else text
        except yaml.YAMLError:
            value = text
        if isinstance(raw.get(parts[0]), dict) or parts[0] in KappaConfig.model_fields:
            _set_dotted(raw, parts, value)
        else:
            problems.append(f"{name}: no config section {parts[0]!r}; remove the variable")


def _set_dotted(raw: dict[str, Any], parts: list[str], value: Any) -> None:
    node = raw
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def _describe(exc: ValidationError) -> list[str]:
    lines = []
    for error in exc.errors():
        key = ".".join(str(p) for p in error["loc"]) or "(top level)"
        found = error.get("input")
        hidden = isinstance(found, dict) or any(word in key for word in ("secret", "password", "token"))
        shown = "" if hidden else f" (found {found!r})"
        message = error["msg"].removeprefix("Value error, ")
        lines.append(f"{key}: {message}{shown}")
    return lines


def _summary(env: str, problems: list[str]) -> str:
    listed = "; ".join(problems)
    return f"invalid configuration for env {env!r} ({len(problems)} problem(s)): {listed}"


def _absolutize(config: KappaConfig) -> KappaConfig:
    def under_root(path: Path) -> Path:
        return path if path.is_absolute() else PROJECT_ROOT / path

    def local_uri(uri: str) -> str:
        return uri if "://" in uri or uri.startswith("/") else str(PROJECT_ROOT / uri)

    return config.model_copy(update={
        "stack": config.stack.model_copy(update={"data_dir": under_root(config.stack.data_dir)}),
        "collector": config.collector.model_copy(
            update={"log_path": under_root(config.collector.log_path)}),
        "lake": config.lake.model_copy(update={
            "root": local_uri(config.lake.root),
            "checkpoint_root": local_uri(config.lake.checkpoint_root)}),
    })
