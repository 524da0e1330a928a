"""The typed shape of kappa's configuration: frozen pydantic models, one per section.

Loaded and validated by :func:`jobs.config.load.load_config`; never built by hand in jobs. The
sections of the stack and the stream live here; the loader's, the access tier's and Airflow's in
:mod:`jobs.config.sections`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    SecretStr,
    field_serializer,
    field_validator,
    model_validator,
)

from jobs.config.sections import (
    AirflowConfig,
    LoaderConfig,
    MonitoringConfig,
    PipelinesConfig,
    SecretsConfig,
    Section,
    ServeConfig,
)

MASK = "**********"
# librdkafka properties flagged _RK_SENSITIVE in rdkafka_conf.c (plus the alias of one):
# masked wherever the config is shown. Those holding a secret value (not a path or a public
# certificate) are refused in conf files like the named secrets (jobs.config.load).
SENSITIVE_CLIENT_PROPS = frozenset({
    "sasl.username", "sasl.password", "sasl.oauthbearer.config", "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.assertion.private.key.file", "sasl.oauthbearer.assertion.private.key.pem",
    "sasl.oauthbearer.assertion.private.key.passphrase", "ssl.key.location", "ssl.key.password",
    "ssl.key.pem", "ssl_key", "ssl.keystore.password", "ssl.ca.pem",
})
FILE_FORBIDDEN_CLIENT_PROPS = SENSITIVE_CLIENT_PROPS - {
    "sasl.oauthbearer.assertion.private.key.file", "ssl.key.location", "ssl.ca.pem"}


_SECRET_WORDS = ("password", "secret", "passphrase")


def sensitive_client_prop(name: str) -> bool:
    """Whether a librdkafka property's value is masked when shown (listed, or named like a secret)."""
    lowered = name.lower()
    return lowered in SENSITIVE_CLIENT_PROPS or any(word in lowered for word in _SECRET_WORDS)


def secret_client_prop(name: str) -> bool:
    """Whether a librdkafka property holds a secret value, which conf files may not hold."""
    lowered = name.lower()
    return lowered in FILE_FORBIDDEN_CLIENT_PROPS or any(word in lowered for word in _SECRET_WORDS)


class KafkaConfig(Section):
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

    @field_serializer("client")
    def _mask_client(self, client: dict[str, Any]) -> dict[str, Any]:
        return {key: MASK if sensitive_client_prop(key) else value for key, value in client.items()}

    @model_validator(mode="after")
    def _sasl_complete(self) -> KafkaConfig:
        if not self.security_protocol.startswith("SASL_"):
            return self
        if self.sasl_mechanism is None:
            raise ValueError(
                f"security_protocol {self.security_protocol} needs kafka.sasl_mechanism (PLAIN, "
                "SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER); set it, or use PLAINTEXT/SSL")
        has_login = self.sasl_username is not None and self.sasl_password is not None
        if self.sasl_mechanism != "OAUTHBEARER" and not has_login and not self.sasl_secret_arn:
            raise ValueError(
                f"security_protocol {self.security_protocol} with {self.sasl_mechanism} needs "
                "credentials: set KAPPA_KAFKA_SASL_USERNAME and KAPPA_KAFKA_SASL_PASSWORD in the "
                "environment, or kafka.sasl_secret_arn with secrets.provider: aws")
        return self


class RedisConfig(Section):
    """The Redis that holds live summaries."""

    host: str = "127.0.0.1"
    port: int = Field(default=6379, ge=1, le=65535)
    db: int = Field(default=0, ge=0)
    tls: bool = False
    tls_ca_file: Path | None = None  # CA bundle that signed the server's certificate (tls: true)
    password: SecretStr | None = None
    auth_secret_arn: str | None = None
    embedded: bool = True

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``redis.Redis``."""
        password = self.password.get_secret_value() if self.password else None
        kwargs: dict[str, Any] = {"host": self.host, "port": self.port, "db": self.db,
                                  "ssl": self.tls, "password": password}
        if self.tls and self.tls_ca_file is not None:
            kwargs["ssl_ca_certs"] = str(self.tls_ca_file)
        return kwargs

    @model_validator(mode="after")
    def _tls_consistent(self) -> RedisConfig:
        if self.tls_ca_file is not None and not self.tls:
            raise ValueError("tls_ca_file is set but tls is false; set redis.tls=true or drop "
                             "redis.tls_ca_file")
        if self.tls and self.embedded:
            raise ValueError("the embedded Redis serves no TLS; set redis.embedded=false to use a "
                             "TLS Redis, or redis.tls=false")
        return self


class StackConfig(Section):
    """Where the embedded stack keeps its data, pidfiles and logs."""

    data_dir: Path = Path("var/stack")
    start_timeout_s: float = Field(default=30, gt=0)
    stop_timeout_s: float = Field(default=30, gt=0)
    kafka_binary: str = "noida-db"
    redis_binary: str = "redis-server"
    kafka_nice: int = Field(default=0, ge=0, le=19)  # the broker's threads (requests)
    kafka_snapshot_nice: int = Field(default=19, ge=0, le=19)  # its state-file rewrite thread


class SparkConfig(Section):
    """How the Spark session factory builds the one session of a run."""

    master: str = "local[2]"
    app_name: str = "kappa"
    shuffle_partitions: int = Field(default=4, ge=1)
    ui_enabled: bool = True
    conf: dict[str, str | int | float | bool] = Field(default_factory=dict)
    service_nice: int = Field(default=10, ge=0, le=19)  # CPU priority of the Spark service (`kappa spark up`)
    kafka_backend: Literal["auto", "python", "jvm"] = "auto"
    delta_backend: Literal["auto", "deltalake", "jvm"] = "auto"
    emr_application_id: str | None = None
    job_role_arn: str | None = None
    artifacts_uri: str | None = None

    @field_validator("master", mode="before")
    @classmethod
    def _master_given(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and (not value.strip() or " " in value.strip())):
            raise ValueError("empty or not a Spark master; set local[N], spark://host:port, "
                             "yarn, k8s://https://host:port or emr-serverless")
        return value


class LakeS3Config(Section):
    """How delta-rs and the executors reach an ``s3://`` lake.

    Credentials come from the standard AWS chain (environment, profile, instance or task role),
    never from this file.
    """

    endpoint_url: str | None = Field(default=None, pattern=r"^https?://\S+$")  # None: AWS S3 itself
    region: str | None = None  # None: AWS_REGION / AWS_DEFAULT_REGION / the instance's region
    allow_http: bool = False  # plain HTTP to endpoint_url (a loopback S3 API server, never AWS)

    @model_validator(mode="after")
    def _http_consistent(self) -> LakeS3Config:
        plain = (self.endpoint_url or "").startswith("http://")
        if plain and not self.allow_http:
            raise ValueError(f"endpoint_url {self.endpoint_url} is plain HTTP but allow_http is false; "
                             "set lake.s3.allow_http=true (a local S3 API server) or use https://")
        if self.allow_http and not plain:
            raise ValueError("allow_http is true but endpoint_url is not an http:// URL; plain HTTP is "
                             "only for a local S3 API server named by lake.s3.endpoint_url")
        return self


class LakeConfig(Section):
    """Where Delta tables and streaming checkpoints live (paths or URIs)."""

    root: str = "var/lake"
    checkpoint_root: str = "var/checkpoints"
    s3: LakeS3Config = LakeS3Config()


class TopicSpec(Section):
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


class CollectorConfig(Section):
    """The collection tier: HTTP endpoint, durable log and producer limits."""

    host: str = "127.0.0.1"
    port: int = Field(default=18080, ge=0, le=65535)
    log_path: Path = Path("var/collector/log.sqlite")
    buffer_limit: int = Field(default=200_000, ge=1)
    max_record_bytes: int = Field(default=65_536, ge=64)
    max_retries: int = Field(default=5, ge=1)
    topic: str = "events.raw"  # default: the kappa-stream pipeline's source topic (config.py)
    dlq_topic: str = "events.dlq"
    drain_timeout_s: float = Field(default=30.0, gt=0)  # drain wait: SIGTERM, end of a file pull
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)  # larger request bodies: 413
    max_connections: int = Field(default=256, ge=1)  # open HTTP connections; more are refused
    header_timeout_s: float = Field(default=10.0, gt=0)  # request headers must arrive within
    body_timeout_s: float = Field(default=60.0, gt=0)  # the request body must arrive within
    auth_token_env: str = Field(default="KAPPA_COLLECTOR_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    auth_token_secret_arn: str | None = None  # Secrets Manager: plain text or JSON {"token": ...}
    auth_token: SecretStr | None = None  # filled from auth_token_secret_arn at load; never in a file


class StreamingConfig(Section):
    """The ``kappa stream`` job (docs/streaming.md); its query and topics default to its pipeline's."""

    query_name: str = Field(default="events-live", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    source_topic: str = "events.raw"
    analyzed_topic: str = "events.analyzed"
    summaries_topic: str = "events.summaries"
    dlq_topic: str = "events.dlq"
    metrics_topic: str = "platform.metrics"
    errors_topic: str = "platform.errors"
    views_topic: str = "platform.views"  # the pointer to the current view version (jobs/views/versions.py)
    trigger_s: float = Field(default=1.0, gt=0)
    max_offsets_per_trigger: int = Field(default=100_000, ge=1)
    max_records_per_partition: int | None = Field(default=None, ge=1)  # larger ranges split into more tasks
    read_in_tasks: bool = True  # kafka-py: tasks read their offset ranges; records never enter the JVM
    task_slots: int | None = Field(default=None, ge=1)  # read_in_tasks: at most N tasks a batch; None: cores
    prefetch_ranges: bool = False  # read_in_tasks: a task fetches its next partition while reading one
    apply_in_background: bool = True  # a batch's Redis effects are applied while the next batch runs
    apply_chunk_args: int = Field(default=20_000, ge=100)  # arguments per fenced apply transaction
    reprocess_nice: int = Field(default=19, ge=0, le=19)  # CPU priority of `kappa reprocess start`'s job
    watermark_s: int = Field(default=60, ge=0)
    future_skew_s: int = Field(default=300, ge=0)
    min_event_ms: int = 946_684_800_000  # 2000-01-01T00:00:00Z: older event times are absurd
    params: dict[str, Any] = Field(default_factory=dict)
    """The pipeline's own settings (window sizes, TTLs, ...): its ``pipeline.yaml`` ``params:``."""
    top_n: int = Field(default=10, ge=1)
    redis_prefix: str = "kappa"
    window_ttl_s: int = Field(default=172_800, ge=60)
    fail_on_data_loss: bool = True
    lease_ttl_s: float = Field(default=30.0, gt=0)  # one driver per query: its Redis lease lasts ...
    lease_renew_s: float = Field(default=10.0, gt=0)  # ... renewed this often (and at every batch)


class KappaConfig(Section):
    """The whole configuration of one run."""

    env: str
    kafka: KafkaConfig
    redis: RedisConfig = RedisConfig()
    stack: StackConfig = StackConfig()
    spark: SparkConfig = SparkConfig()
    lake: LakeConfig = LakeConfig()
    collector: CollectorConfig = CollectorConfig()
    airflow: AirflowConfig = AirflowConfig()
    streaming: StreamingConfig = StreamingConfig()
    loader: LoaderConfig = LoaderConfig()
    serve: ServeConfig = ServeConfig()
    monitoring: MonitoringConfig = MonitoringConfig()
    pipelines: PipelinesConfig = PipelinesConfig()
    secrets: SecretsConfig = SecretsConfig()
    topics: dict[str, TopicSpec] = Field(default_factory=dict)
