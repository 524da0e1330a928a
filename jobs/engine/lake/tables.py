"""A pipeline's declared tables as the loader's :class:`~jobs.loader.tables.TableSpec` targets.

A table declared with ``topic:`` is loaded by what that topic is to the pipeline:

- the source topic: raw records (``key``, the event time field, ``value``, Kafka position);
- the analyzed topic: the analyzed records parsed with the code's ``analyzed_schema`` plus the
  engine's fields, merged on the table's ``dedup_key`` (a later event time, or a later source
  offset, replaces a stored row; a record delivered again leaves it as it is);
- the dead-letter topic: dead letters split like ``ops.dlq`` (reason, source position, bytes).

Each is partitioned by its declared ``partition_by`` column (the UTC date) and checked by a
suite derived from the declaration (jobs/loader/suites.py rules). The loader itself (offsets
as Delta app transactions, quality gates, write paths) is jobs/loader/load.py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobs.config.load import KappaConfig
from jobs.errors import ConfigError
from jobs.lake.delta import table_uri
from jobs.loader.suites import DLQ_COLUMNS, Rule, column_set, event_ms, not_null
from jobs.loader.tables import LoadTarget, TableSpec
from jobs.pipelines.define import Definitions
from jobs.pipelines.spec import PipelineSpec, Table

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

ROWS = "jobs.engine.lake.rows"
ENGINE_FIELDS = ("source_topic", "source_partition", "source_offset", "late")
"""What the engine adds to every analyzed record (jobs/engine/task.py)."""
KAFKA_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp")
POSITION = ("kafka_partition", "kafka_offset")


def analyzed_struct(spec: PipelineSpec, code: Definitions) -> StructType:
    """The analyzed record as Spark reads it: the code's ``analyzed_schema`` and the engine's fields."""
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import from_arrow_schema

    if code.analyzed_schema is None:
        raise ConfigError(f"pipeline {spec.name}: its code sets no analyzed_schema, so its analyzed "
                          "records cannot be read into the lake; set `pipeline.analyzed_schema`")
    declared = from_arrow_schema(code.analyzed_schema, prefer_timestamp_ntz=False)
    taken = {field.name for field in declared.fields}
    types = (T.StringType(), T.IntegerType(), T.LongType(), T.BooleanType())
    engine = [T.StructField(name, kind) for name, kind in zip(ENGINE_FIELDS, types, strict=True)
              if name not in taken]
    return T.StructType([*declared.fields, *engine])


def ddl(struct: StructType) -> str:
    """Spark DDL of a struct's fields (``name type, ...``)."""
    return ", ".join(f"`{field.name}` {field.dataType.simpleString()}" for field in struct.fields)


def table_spec(cfg: KappaConfig, spec: PipelineSpec, code: Definitions, name: str, decl: Table) -> TableSpec:
    """The loader's spec of one table the pipeline loads from a topic."""
    date = decl.partition_by
    event = spec.event_time.field
    columns: tuple[str, ...]
    if decl.topic == spec.source.topic:
        columns = ("key", event, "value", *KAFKA_COLUMNS, date)
        return TableSpec(name, f"{ROWS}:raw_rows", "append", POSITION, (date,), date_column=date,
                         args=(event, date), rules=(column_set(columns), not_null("kafka_offset")))
    if decl.topic == spec.outputs.dlq.topic:
        columns = tuple(date if column == "dlq_date" else column for column in DLQ_COLUMNS)
        return TableSpec(name, f"{ROWS}:dead_letter_rows", "append", POSITION, (date,), headers=True,
                         date_column=date, args=(date,),
                         rules=(column_set(columns), not_null("reason"), not_null("kafka_offset")))
    if decl.topic == spec.outputs.analyzed.topic:
        return _silver(cfg, spec, code, name, decl)
    raise ConfigError(f"pipeline {spec.name}: table {name} reads topic {decl.topic!r}, which is none of its "
                      f"source ({spec.source.topic}), analyzed ({spec.outputs.analyzed.topic}) or "
                      f"dead-letter ({spec.outputs.dlq.topic}) topics; the lake loads only those")


def _silver(cfg: KappaConfig, spec: PipelineSpec, code: Definitions, name: str, decl: Table) -> TableSpec:
    struct = analyzed_struct(spec, code)
    fields = [field.name for field in struct.fields]
    event = spec.event_time.field
    if not decl.dedup_key:
        raise ConfigError(f"pipeline {spec.name}: table {name} holds analyzed records but declares no "
                          "dedup_key; declare the fields that identify a record, e.g. dedup_key: [id]")
    missing = [key for key in [*decl.dedup_key, event] if key not in fields]
    if missing:
        raise ConfigError(f"pipeline {spec.name}: table {name}: {missing} are not fields of the analyzed "
                          f"record ({', '.join(fields)}); fix dedup_key or event_time.field")
    keys = tuple(decl.dedup_key)
    newer = (f"s.`{event}` > t.`{event}` OR (s.`{event}` = t.`{event}` "
             "AND s.source_offset > t.source_offset)")
    rules: tuple[Rule, ...] = (
        column_set([*fields, "kafka_partition", "kafka_offset", "kafka_timestamp", decl.partition_by]),
        *(not_null(key) for key in keys), not_null(event), event_ms(cfg, event))
    return TableSpec(name, f"{ROWS}:analyzed_rows", "merge", keys, (decl.partition_by,), newer=newer,
                     date_column=decl.partition_by, args=(ddl(struct), keys, event, decl.partition_by),
                     rules=rules)


def loaded_tables(spec: PipelineSpec) -> dict[str, Table]:
    """The tables the pipeline loads from a topic, in declaration order."""
    return {name: decl for name, decl in spec.tables.items() if decl.topic is not None}


def load_targets(cfg: KappaConfig, spec: PipelineSpec, code: Definitions,
                 names: Sequence[str] | None = None) -> list[LoadTarget]:
    """The load targets of the pipeline's tables (all loaded ones, or ``names``)."""
    tables = loaded_tables(spec)
    unknown = sorted(set(names or []) - set(tables))
    if unknown:
        raise ConfigError(f"pipeline {spec.name} loads no table(s) {', '.join(unknown)}; it loads: "
                          f"{', '.join(tables) or 'none'}")
    chosen = [name for name in tables if not names or name in names]
    return [LoadTarget(table_spec(cfg, spec, code, name, tables[name]), tables[name].topic or "",
                       tables[name].quality_policy, table_uri(cfg.lake.root, name)) for name in chosen]


def silver_table(spec: PipelineSpec) -> tuple[str, Table]:
    """The one table that holds the pipeline's analyzed records (what gold and reconcile read)."""
    found = [(name, decl) for name, decl in loaded_tables(spec).items()
             if decl.topic == spec.outputs.analyzed.topic]
    if len(found) != 1:
        raise ConfigError(f"pipeline {spec.name}: {len(found)} tables load its analyzed topic "
                          f"{spec.outputs.analyzed.topic}; gold and reconcile read exactly one: declare one")
    return found[0]
