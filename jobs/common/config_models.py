"""The typed shape of kappa's configuration: frozen pydantic models, one per section.

Loaded and validated by :func:`jobs.common.config.load_config`; never built by hand in jobs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KafkaConfig(_Section):
    """How every Kafka client (collector, Spark source and sink, admin) connects."""

    bootstrap_servers: str = Field(min_length=3, pattern=r"^[^,\s]+:\d+(,[^,\s]+:\d+)*$")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = None
    sasl_secret_arn: str | None = None
    sasl_username: SecretStr | None = None
    sasl_password: SecretStr | None = None
    embedded: bool = True
    client: dict[str, str | int | float | bool] = Field(default_factory=dict)

    def client_config(self) -> dict[str, Any]:
        """Return librdkafka properties, secrets included (never log the result)."""
        props: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            props["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            props["sasl.username"] = self.sasl_username.get_secret_value()
        if self.sasl_password is not None:
            props["sasl.password"] = self.sasl_password.get_secret_value()
        props.update({key: str(value) for key, value in self.client.items()})
        return props


class RedisConfig(_Section):
    """The Redis that holds live summaries."""

    host: str = "127.0.0.1"
    port: int = Field(default=6379, ge=1, le=65535)
    db: int = Field(default=0, ge=0)
    tls: bool = False
    password: SecretStr | None = None
    auth_secret_arn: str | None = None
    embedded: bool = True

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``redis.Redis``."""
        password = self.password.get_secret_value() if self.password else None
        return {"host": self.host, "port": self.port, "db": self.db, "ssl": self.tls,
                "password": password}


class StackConfig(_Section):
    """Where the embedded stack keeps its data, pidfiles and logs."""

    data_dir: Path = Path("var/stack")
    start_timeout_s: float = Field(default=30, gt=0)
    stop_timeout_s: float = Field(default=30, gt=0)
    kafka_binary: str = "noida-db"
    redis_binary: str = "redis-server"


class SparkConfig(_Section):
    """How the Spark session factory builds the one session of a run."""

    master: str = "local[2]"
    app_name: str = "kappa"
    shuffle_partitions: int = Field(default=4, ge=1)
    ui_enabled: bool = True
    conf: dict[str, str | int | float | bool] = Field(default_factory=dict)
    kafka_backend: Literal["auto", "python", "jvm"] = "auto"
    delta_backend: Literal["auto", "deltalake", "jvm"] = "auto"
    emr_application_id: str | None = None
    job_role_arn: str | None = None
    artifacts_uri: str | None = None


class LakeConfig(_Section):
    """Where Delta tables and streaming checkpoints live (paths or URIs)."""

    root: str = "var/lake"
    checkpoint_root: str = "var/checkpoints"


class TopicSpec(_Section):
    """A topic the platform owns, applied by ``kappa topics apply``."""

    partitions: int = Field(default=3, ge=1)
    replication_factor: int = Field(default=1, ge=1)
    retention_ms: int = Field(default=604_800_000, ge=-1)
    cleanup_policy: Literal["delete", "compact", "compact,delete"] = "delete"
    config: dict[str, str] = Field(default_factory=dict)

    def topic_config(self) -> dict[str, str]:
        """Topic-level configs as Kafka expects them."""
        return {"retention.ms": str(self.retention_ms), "cleanup.policy": self.cleanup_policy,
                **self.config}


class CollectorConfig(_Section):
    """The collection tier: HTTP endpoint, durable log and producer limits."""

    host: str = "127.0.0.1"
    port: int = Field(default=18080, ge=0, le=65535)
    log_path: Path = Path("var/collector/log.sqlite")
    buffer_limit: int = Field(default=200_000, ge=1)
    max_record_bytes: int = Field(default=65_536, ge=64)
    max_retries: int = Field(default=5, ge=1)
    topic: str = "rsvps.raw"
    dlq_topic: str = "rsvps.dlq"


class AirflowConfig(_Section):
    """Where Airflow runs (filled on AWS from Terraform outputs)."""

    dags_uri: str | None = None
    webserver_url: str | None = None


class KappaConfig(_Section):
    """The whole configuration of one run."""

    env: str
    kafka: KafkaConfig
    redis: RedisConfig = RedisConfig()
    stack: StackConfig = StackConfig()
    spark: SparkConfig = SparkConfig()
    lake: LakeConfig = LakeConfig()
    collector: CollectorConfig = CollectorConfig()
    airflow: AirflowConfig = AirflowConfig()
    topics: dict[str, TopicSpec] = Field(default_factory=dict)
