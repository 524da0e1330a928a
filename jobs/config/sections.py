"""Configuration sections of the tiers above the stream: the loader, the access tier, Airflow.

Part of the models of :mod:`jobs.config.models` (which holds :class:`KappaConfig` and
the sections of the stack and the stream); here also :class:`Section`, the frozen base of every
section.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class Section(BaseModel):
    """A frozen section that refuses unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class LoaderTableConfig(Section):
    """One loaded table: its source topic and its data-quality policy."""

    topic: str
    enabled: bool = True
    quality_policy: Literal["fail", "quarantine"] = "fail"


class LoaderConfig(Section):
    """The Kafka -> Delta batch loader (docs/tables.md); owned by jobs/loader."""

    tables: dict[str, LoaderTableConfig] = Field(default_factory=dict)  # the kappa-stream pipeline's
    max_records_per_run: int | None = Field(default=None, ge=1)  # per table; None = to the bound
    driver_path_max_rows: int = Field(default=500_000, ge=1)  # records per driver-path batch (measured)
    driver_path_max_bytes: int = Field(default=128 * 1024 * 1024, ge=1)  # Kafka bytes per driver-path batch
    write_path: Literal["auto", "driver", "executors"] = "auto"  # who writes append tables' files
    executor_chunk_rows: int = Field(default=200_000, ge=1)  # rows an executor validates and writes at once
    freshness_max_age_s: int = Field(default=86_400, ge=1)  # DQ: newest event at most this old
    freshness_blocking: bool = False  # a stale batch is reported (False) or fails its suite
    future_skew_s: int = Field(default=300, ge=0)  # DQ: event times further ahead are invalid
    min_event_ms: int = 946_684_800_000  # DQ: 2000-01-01; older event times are invalid
    compact_min_files: int = Field(default=4, ge=2)  # a closed partition with more is compacted
    compact_target_mb: int = Field(default=128, ge=1)
    open_partition_days: int = Field(default=1, ge=0)  # event dates this recent are never compacted
    vacuum_retention_h: int = Field(default=168, ge=0)
    vacuum_floor_h: int = Field(default=24, ge=0)  # vacuum refuses anything shorter
    slowest_reader_lag_h: int = Field(default=24, ge=0)  # oldest snapshot a reader may still read


class MonitoringConfig(Section):
    """The metrics exporter (``kappa metrics serve``) and local Prometheus (docs/runbooks/monitoring.md)."""

    host: str = "127.0.0.1"
    port: int = Field(default=19464, ge=0, le=65535)
    cache_s: float = Field(default=5.0, ge=0)  # a scrape within this long of the last reads Redis/Kafka once
    airflow_url: str | None = None  # Airflow API base (e.g. http://127.0.0.1:18280): scheduler health


class PipelinesConfig(Section):
    """The pipeline a command acts on when given no ``--pipeline`` (docs/reference/pipeline-yaml.md)."""

    default: str | None = None  # None: the only pipeline found; several found: --pipeline is needed


class ServeConfig(Section):
    """The data access tier (``kappa serve``, docs/api.md); owned by jobs/serve.

    The bearer token is never configured in a file: it is read from the environment variable
    named by ``auth_token_env``, else from Secrets Manager by ``auth_token_secret_arn``
    (``secrets.provider: aws``) into ``auth_token``. Auth is off when neither gives a token,
    unless ``require_auth`` makes the service refuse to start without it.
    """

    host: str = "127.0.0.1"
    port: int = Field(default=18090, ge=0, le=65535)
    analyzed_topic: str | None = None     # None: streaming.analyzed_topic
    summaries_topic: str | None = None    # None: streaming.summaries_topic
    auth_token_env: str = Field(default="KAPPA_SERVE_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    auth_token_secret_arn: str | None = None  # Secrets Manager: plain text or JSON {"token": ...}
    auth_token: SecretStr | None = None  # filled from auth_token_secret_arn at load; never in a file
    require_auth: bool = False
    ring_buffer_size: int = Field(default=20_000, ge=0)
    client_buffer: int = Field(default=2_000, ge=1)
    lag_warning_fraction: float = Field(default=0.5, gt=0, le=1)
    send_timeout_s: float = Field(default=10.0, gt=0)
    ping_s: float = Field(default=15.0, gt=0)
    max_clients: int = Field(default=1_000, ge=1)
    max_filter_values: int = Field(default=50, ge=1)
    rate_limit_per_s: float = Field(default=20.0, gt=0)
    rate_limit_burst: int = Field(default=100, ge=1)
    catchup_workers: int = Field(default=4, ge=1)
    catchup_timeout_s: float = Field(default=60.0, gt=0)
    consumer_batch: int = Field(default=500, ge=1)
    default_windows: int = Field(default=5, ge=1, le=1_000)


class SecretsConfig(Section):
    """Where the ``*_secret_arn`` keys are read (docs/deploy.md "Secrets").

    ``env``: secrets come only from ``KAPPA_*`` environment variables, the ARNs are not read.
    ``aws``: each secret the environment does not set is read from AWS Secrets Manager at load
    (once per process); an environment variable still wins over its ARN.
    """

    provider: Literal["env", "aws"] = "env"
    region: str | None = None  # None: the ARN's region, else AWS_REGION / the AWS profile's
    endpoint_url: str | None = None  # None: AWS's (or AWS_ENDPOINT_URL_SECRETS_MANAGER); tests: moto
    timeout_s: float = Field(default=5.0, gt=0)  # connect and read timeout of one API call


class AirflowConfig(Section):
    """Where Airflow runs: the local one of ``kappa airflow up``, or MWAA from Terraform outputs."""

    dags_uri: str | None = None
    webserver_url: str | None = None
    home: Path | None = None  # AIRFLOW_HOME; default <stack.data_dir>/airflow
    host: Literal["127.0.0.1", "localhost"] = "127.0.0.1"
    port: int = Field(default=18280, ge=0, le=65535)  # API server and UI; 0 = a free port at `up`
    log_port: int = Field(default=0, ge=0, le=65535)  # task log server on loopback; 0 = a free port
    parallelism: int = Field(default=4, ge=1)  # LocalExecutor workers (each is a process)
    api_workers: int = Field(default=1, ge=1)
    sql_alchemy_conn: SecretStr | None = None  # None = SQLite in home; set KAPPA_AIRFLOW__SQL_ALCHEMY_CONN
    admin_user: str = Field(default="admin", pattern=r"^[A-Za-z0-9_.-]+$")
    start_timeout_s: float = Field(default=180, gt=0)
    stop_timeout_s: float = Field(default=20, gt=0)  # SIGTERM grace per process group before SIGKILL
