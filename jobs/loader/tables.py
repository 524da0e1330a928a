"""The loaded tables: source topic, transform, partitioning, write mode (docs/tables.md)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from jobs.config.load import KappaConfig
from jobs.errors import ConfigError
from jobs.lake.delta import WriteMode, table_uri
from jobs.loader.suites import Rule

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.loader.offsets import PartitionRange

AUDIT_TABLE = "ops.load_audit"
QUALITY_TABLE = "ops.quality_results"
APP_PREFIX = "kappa-loader"


@dataclass(frozen=True)
class TableSpec:
    """How one Delta table is fed from one topic.

    Attributes:
        name: ``schema.table``.
        transform: name of the pure transform in :mod:`jobs.loader.transforms`, or
            ``module:name`` of one elsewhere (a pipeline's own); with ``args``, the name is of a
            factory called with them (jobs/engine/lake/).
        mode: ``append`` (every record a row) or ``merge`` (upsert on ``keys``).
        keys: the merge / uniqueness key.
        partition_by: partition columns.
        newer: merge condition: when a matched incoming row replaces the stored one.
        headers: whether the read needs Kafka headers.
        date_column: the partition date column (maintenance closes old dates).
        args: the arguments of a ``module:factory`` transform (plain values: a spec travels to
            the Spark service).
        rules: the table's quality suite when the spec carries its own (else the one the pipeline
            registers with ``@pipeline.quality``: :func:`~jobs.loader.suites.suite_rules`).
    """

    name: str
    transform: str
    mode: WriteMode
    keys: tuple[str, ...]
    partition_by: tuple[str, ...]
    newer: str | None = None
    headers: bool = False
    date_column: str | None = None
    args: tuple[str | tuple[str, ...], ...] = ()
    rules: tuple[Rule, ...] = ()

    def rows(self) -> Callable[[DataFrame], DataFrame]:
        """The pure transform (imports pyspark only when called)."""
        module, _, name = self.transform.rpartition(":")
        found = getattr(importlib.import_module(module or "jobs.loader.transforms"), name)
        return found(*self.args) if self.args else found

    def app_id(self, topic: str, partition: int) -> str:
        """The Delta app id that records this table's offset of one topic-partition."""
        return f"{APP_PREFIX}/{self.name}/{topic}/{partition}"


def specs(cfg: KappaConfig) -> dict[str, TableSpec]:
    """The specs of the pipeline's tables by name (what its code registers with ``pipeline.tables``)."""
    from jobs.loader.pipeline import loaded_code

    return dict(loaded_code(cfg).table_specs)


_VERSIONED = re.compile(r"_v[0-9]+$")


@dataclass(frozen=True)
class LoadTarget:
    """A configured table with its topic, policy and location."""

    spec: TableSpec
    topic: str
    policy: str
    uri: str


POLICIES = ("fail", "quarantine")


def parse_policies(items: list[str] | None) -> dict[str, str]:
    """``TABLE=POLICY`` operator overrides (``kappa load --policy``) as table -> policy."""
    policies: dict[str, str] = {}
    for item in items or []:
        table, _, policy = item.partition("=")
        if not table.strip() or policy.strip() not in POLICIES:
            raise ConfigError(f"--policy {item!r}: expected TABLE=POLICY with POLICY one of "
                              f"{', '.join(POLICIES)}, e.g. --policy silver.events=quarantine")
        policies[table.strip()] = policy.strip()
    return policies


def targets(cfg: KappaConfig, names: list[str] | None = None,
            policies: dict[str, str] | None = None) -> list[LoadTarget]:
    """The tables to load (all enabled ones, or ``names``), in config order.

    The tables of every view version with outputs are loaded (``silver.events`` and, while version 2
    is built or kept, ``silver.events_v2``: docs/reprocess.md). ``policies`` overrides the
    configured quality policy of some tables for this run.
    """
    from jobs.views.versions import live_tables

    configured = live_tables(cfg)
    overridden = sorted(set(policies or {}) - set(configured))
    if overridden:
        raise ConfigError(f"--policy names unknown table(s) {', '.join(overridden)}; configured: "
                          f"{', '.join(configured)}")
    unknown = sorted(set(names or []) - set(configured))
    if unknown:
        raise ConfigError(f"unknown table(s) {', '.join(unknown)}; configured: {', '.join(configured)} "
                          "(loader.tables in conf/)")
    known = specs(cfg)
    missing = sorted(name for name in configured if spec_of(known, name) is None)
    if missing:
        raise ConfigError(f"loader.tables names {', '.join(missing)} but pipeline "
                          f"{cfg.pipelines.default or '(the only one)'} declares only "
                          f"{', '.join(known) or 'no tables'}")
    if names:
        chosen = [name for name in configured if name in names]
    else:
        chosen = [name for name, table in configured.items() if table.enabled]
    return [LoadTarget(spec_of(known, name), configured[name].topic,  # type: ignore[arg-type]
                       (policies or {}).get(name, configured[name].quality_policy),
                       table_uri(cfg.lake.root, name)) for name in chosen]


def spec_of(known: dict[str, TableSpec], name: str) -> TableSpec | None:
    """The spec of a table of ``known``, or of the view version's copy of one (``silver.events_v2``)."""
    base = _VERSIONED.sub("", name)
    spec = known.get(base)
    return replace(spec, name=name) if spec is not None and base != name else spec


def read_frame(spark: SparkSession, cfg: KappaConfig, target: LoadTarget,
               ranges: list[PartitionRange]) -> DataFrame:
    """The ranges read through the Kafka data source (a task per partition), as the table's rows.

    The read is not split further (``maxRecordsPerPartition``): the embedded broker answers
    every fetch with the rest of the partition, so each split would read it again; executor
    tasks bound their memory by validating and writing in chunks instead.
    """
    from jobs.spark.kafka_io import read_kafka

    starting: dict[str, dict[int | str, int]] = {target.topic: {r.partition: r.start for r in ranges}}
    ending: dict[str, dict[int | str, int]] = {target.topic: {r.partition: r.end for r in ranges}}
    options = {"includeHeaders": "true"} if target.spec.headers else {}
    frame = read_kafka(spark, cfg, topics=target.topic, starting=starting, ending=ending, options=options)
    return frame.transform(target.spec.rows())


def quarantine_name(table: str) -> str:
    """``quarantine.<schema>_<table>``: where a table's failing rows go."""
    return "quarantine." + table.replace(".", "_")
