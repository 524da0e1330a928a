"""The pipeline's records as ``kappa stream`` runs them: parse, analyze, encode, count.

A pipeline whose streaming job is ``kappa stream`` (``streaming.job: kappa-stream`` in its
``pipeline.yaml``) registers one :class:`RecordCodec` with its definition
(``pipeline.records = ...``). The job loads it once at start (:func:`stream_codec`) and ships it
to its tasks in their plan, so the streaming tier names no pipeline: every per-record step of
a task (:mod:`jobs.streaming.task`) and of the stream-time scan (:mod:`jobs.streaming.stream_time`)
is a function of the codec.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from jobs.errors import KappaError

if TYPE_CHECKING:
    import pyarrow as pa

    from jobs.config.load import KappaConfig
    from jobs.streaming.redis_script import ApplyOps, Reads
    from jobs.streaming.redis_sink import Keys
    from jobs.streaming.resp import EntityHash

STREAM_JOB = "kappa-stream"
"""The ``streaming.job`` of a pipeline that ``kappa stream`` runs."""


class Counter(Protocol):
    """A task's summary increments of its analyzed records (rows of ``aggregates.INCREMENT_COLUMNS``)."""

    def add(self, record: dict[str, Any]) -> None:
        """Count one analyzed record."""

    def take_members(self) -> dict[int, list[str]]:
        """Remove the distinct-count items and return them by window start (-1: all time)."""

    def rows(self) -> list[dict[str, Any]]:
        """One increment row per key."""


class Changed(Protocol):
    """What one apply changed: the reads of its new values, and those values as summary records."""

    def reads(self, windows_ms: dict[str, int], top_n: int) -> Reads:
        """The reads of every value the apply changed (Redis answers them after the writes)."""

    def records(self, replies: list[Any]) -> list[dict[str, Any]]:
        """The summary records (the summaries topic) of the replies to :meth:`reads`."""


class RedisViews(Protocol):
    """The pipeline's Redis views: its key scheme, as the fenced apply writes and reads it back."""

    @property
    def entity(self) -> EntityHash | None:
        """The increment kind written as one hash per item (formatted column-wise for speed), or None."""

    def write(self, ops: ApplyOps, increments: pa.Table, entities: pa.Array) -> Changed:
        """Add the writes of a batch's summed increment rows (all but the entity's) to ``ops``.

        ``entities``: the ids of the entities the apply writes (``ops.events``), in their order.
        """


@dataclass(frozen=True)
class RecordCodec:
    """What the streaming job calls per record, registered by the pipeline it runs.

    Functions of importable modules, so the codec travels to the executors by reference.
    """

    parse: Callable[[bytes | None, int | None, Any], tuple[Any, str | None]]
    """``(value, Kafka ms, rules)`` -> ``(typed record, None)``, or ``(None, "<code>: <detail>")``."""
    event_ms: Callable[[Any], int]
    """The event time of a typed record, epoch milliseconds."""
    analyzed: Callable[..., dict[str, Any]]
    """``(typed record, topic, partition, offset, Kafka ms, *, late)`` -> the analyzed record."""
    analyzed_value: Callable[[dict[str, Any]], bytes]
    """The value of an analyzed record on the analyzed topic."""
    analyzed_key: str
    """The analyzed record's field whose text keys it on the analyzed topic."""
    counter: Callable[[Any], Counter]
    """``windows`` -> an empty :class:`Counter`."""
    rules: Callable[[KappaConfig], Any]
    """The validation rules ``parse`` takes, from the config."""
    windows: Callable[[KappaConfig], Any]
    """The window sizes ``counter`` takes, from the config (a dataclass with ``sizes_ms()``)."""
    views: Callable[[KappaConfig, Keys], RedisViews]
    """``(config, key names under the prefix)`` -> the pipeline's :class:`RedisViews`."""
    distinct: str = "distinct"
    """The key name of the HyperLogLogs the tasks add their distinct items to
    (``<prefix>:<distinct>:<window start>``, ``...:all``)."""


class StreamPipelineError(KappaError):
    """No single valid pipeline for ``kappa stream`` to run."""


@functools.cache
def stream_codec() -> RecordCodec:
    """The record codec of the one pipeline with ``streaming.job: kappa-stream``, loaded once per process."""
    from jobs.pipelines.registry import discover, load, load_spec

    found = [folder for folder in discover()
             if (spec := load_spec(folder).spec) is not None and spec.streaming.job == STREAM_JOB]
    if len(found) != 1:
        raise StreamPipelineError(
            f"{len(found)} pipelines have streaming.job: {STREAM_JOB} "
            f"({', '.join(folder.name for folder in found) or 'none'}); `kappa stream` runs exactly one: "
            "set the others' streaming.job to engine (docs/reference/pipeline-yaml.md)")
    loaded = load(found[0])
    records = loaded.code.records if loaded.code is not None else None
    if loaded.problems or records is None:
        problems = "; ".join(loaded.problems) or "its code registers no record codec (pipeline.records)"
        raise StreamPipelineError(f"pipeline {loaded.name}: {problems}; run `kappa pipelines validate "
                                  f"{loaded.name}`")
    return records
