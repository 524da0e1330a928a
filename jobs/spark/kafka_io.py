"""``read_kafka`` / ``write_kafka``: the one Kafka interface of every job, over two backends.

Bootstrap servers and security come from the config. The Python data source (``kafka-py``) is
the default; where Spark's JVM connector is on the classpath (``choose_backends(cfg).kafka ==
"jvm"``) the same options go to ``format("kafka")``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobs.config.load import KappaConfig
from jobs.errors import KafkaSourceError
from jobs.kafka.source import FORMAT
from jobs.lake import statefs
from jobs.spark.backends import choose_backends

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

logger = logging.getLogger(__name__)

JVM_FORMAT = "kafka"
PYTHON_ONLY = {"commitoffsetstogroup", "datalosslogdir", "initialoffsetsfile", "flushtimeoutms",
               "emitranges"}
STATE_FOLDER = "kafka-py"
INITIAL_OFFSETS = "initial-offsets.json"
Bound = str | Mapping[str, Mapping[int | str, int]] | datetime
_JAAS = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def read_kafka(spark: SparkSession, cfg: KappaConfig, *, topics: str | Sequence[str] | None = None,
               pattern: str | None = None, starting: Bound = "earliest", ending: Bound | None = None,
               stream: bool = False, options: Mapping[str, Any] | None = None,
               checkpoint: str | None = None) -> DataFrame:
    """Read Kafka topics as a DataFrame with Spark's Kafka source schema.

    Args:
        spark: the session (from ``build_spark``).
        cfg: the run's config: bootstrap servers and security.
        topics: topic name(s) to subscribe to.
        pattern: instead of ``topics``, a regular expression matching whole topic names.
        starting: ``"earliest"``, ``"latest"``, ``{topic: {partition: offset}}`` (-2 earliest,
            -1 latest) or an aware ``datetime`` (first record at or after it).
        ending: like ``starting`` (exclusive); None reads to the latest offsets (batch) or
            without end (stream; a bound turns an availableNow run into a bounded replay).
        stream: ``readStream`` instead of ``read``.
        options: more source options (maxOffsetsPerTrigger, failOnDataLoss, includeHeaders, ...).
        checkpoint: the streaming query's checkpoint; the Python source keeps its resolved
            initial offsets and data-loss ledger in ``<checkpoint>/kafka-py/`` (a local path or
            S3, jobs/lake/statefs.py).
    """
    fmt, opts = read_options(cfg, topics=topics, pattern=pattern, starting=starting, ending=ending,
                             stream=stream, options=options, checkpoint=checkpoint)
    reader = spark.readStream if stream else spark.read
    logger.info("read_kafka format=%s stream=%s topics=%s pattern=%s", fmt, stream, topics, pattern)
    return reader.format(fmt).options(**opts).load()


def read_options(cfg: KappaConfig, *, topics: str | Sequence[str] | None = None,
                 pattern: str | None = None, starting: Bound = "earliest", ending: Bound | None = None,
                 stream: bool = False, options: Mapping[str, Any] | None = None,
                 checkpoint: str | None = None) -> tuple[str, dict[str, str]]:
    """The format and options :func:`read_kafka` passes to Spark (same arguments)."""
    opts = {**_strategy(topics, pattern), **_bound("starting", starting)}
    if ending is not None:
        opts |= _bound("ending", ending)
    if stream and checkpoint:
        state = statefs.location(checkpoint) / STATE_FOLDER
        opts |= {"initialOffsetsFile": str(state / INITIAL_OFFSETS),
                 "dataLossLogDir": str(state / "data-loss")}
    opts |= {key: str(value) for key, value in (options or {}).items()}
    return _route(cfg, opts)


def write_kafka(df: DataFrame, cfg: KappaConfig, *, topic: str | None = None,
                checkpoint: str | None = None, options: Mapping[str, Any] | None = None,
                trigger: Mapping[str, Any] | None = None, query_name: str | None = None,
                output_mode: str = "append") -> StreamingQuery | None:
    """Write ``value`` (+ ``key``, ``topic``, ``headers``, ``partition``) columns to Kafka.

    A batch DataFrame is written now and None returned; a streaming one starts a query
    (``checkpoint`` required; ``trigger`` e.g. ``{"availableNow": True}``) that is returned.
    """
    opts = {key: str(value) for key, value in (options or {}).items()}
    if topic is not None:
        opts["topic"] = topic
    fmt, opts = _route(cfg, opts)
    if not df.isStreaming:
        df.write.format(fmt).options(**opts).mode("append").save()
        return None
    if not checkpoint:
        raise KafkaSourceError("write_kafka of a streaming DataFrame needs checkpoint=<path>; "
                               "derive it from the query name (see STYLE.md, stable names)")
    writer = (df.writeStream.format(fmt).options(**opts).outputMode(output_mode)
              .option("checkpointLocation", checkpoint))
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()


def kafka_options(cfg: KappaConfig, backend: str) -> dict[str, str]:
    """``kafka.*`` options from the config, as the chosen backend's client expects them."""
    props = dict(cfg.kafka.client_config())
    if backend == "jvm":
        props = _java_client_props(props)
    return {f"kafka.{key}": value for key, value in props.items()}


def _route(cfg: KappaConfig, opts: dict[str, str]) -> tuple[str, dict[str, str]]:
    backend = choose_backends(cfg).kafka
    merged = kafka_options(cfg, backend) | opts
    if backend == "python":
        return FORMAT, merged
    dropped = sorted(key for key in merged if key.lower() in PYTHON_ONLY)
    if dropped:
        logger.warning("options %s only apply to the kafka-py source; the JVM connector ignores "
                       "them", dropped)
    return JVM_FORMAT, {key: value for key, value in merged.items() if key.lower() not in PYTHON_ONLY}


def _strategy(topics: str | Sequence[str] | None, pattern: str | None) -> dict[str, str]:
    if (topics is None) == (pattern is None):
        raise KafkaSourceError("read_kafka needs exactly one of topics= or pattern=")
    if pattern is not None:
        return {"subscribePattern": pattern}
    names = [topics] if isinstance(topics, str) else list(topics or [])
    return {"subscribe": ",".join(names)}


def _bound(side: str, value: Bound) -> dict[str, str]:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise KafkaSourceError(f"read_kafka {side}={value!r} is a naive datetime; give it a "
                                   "timezone (datetime.now(UTC))")
        return {f"{side}Timestamp": str(int(value.timestamp() * 1000))}
    if isinstance(value, str):
        return {f"{side}Offsets": value}
    if isinstance(value, Mapping):
        data = {topic: {str(p): int(o) for p, o in parts.items()} for topic, parts in value.items()}
        return {f"{side}Offsets": json.dumps(data)}
    raise KafkaSourceError(f"read_kafka {side}={value!r}: expected 'earliest', 'latest', "
                           "{topic: {partition: offset}} or an aware datetime")


def _java_client_props(props: dict[str, str]) -> dict[str, str]:
    user, password = props.pop("sasl.username", None), props.pop("sasl.password", None)
    mechanism = props.get("sasl.mechanism", "PLAIN")
    if user is not None and mechanism in _JAAS:
        props["sasl.jaas.config"] = (f'{_JAAS[mechanism]} required username="{_jaas_quote(user)}" '
                                     f'password="{_jaas_quote(password or "")}";')
    return props


def _jaas_quote(value: str) -> str:
    """Escape a value for a double-quoted JAAS option (Kafka's JaasConfig tokenizer)."""
    return value.replace("\\", "\\\\").replace('"', '\\"')
