"""What a run of the streaming job is asked to do and what it reports: light to import.

``kappa stream run`` builds a :class:`RunSpec` and, with the Spark service up, sends it there
(jobs/spark/attach.py) and prints the :class:`Report` it gets back, without importing
Spark or the job's modules.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from jobs.config.load import KappaConfig
    from jobs.spark.kafka_io import Bound

Mode = Literal["live", "replay"]
KAFKA, REDIS = "kafka", "redis"
SINKS = (KAFKA, REDIS)


@dataclass(frozen=True)
class RunSpec:
    """What one run of the job does."""

    mode: Mode = "live"
    query: str | None = None
    starting: Bound = "earliest"
    ending: Bound | None = None
    sinks: frozenset[str] = frozenset(SINKS)
    skip_lost: bool = False
    max_offsets_per_trigger: int | None = None
    fresh: bool = False

    def query_name(self, cfg: KappaConfig) -> str:
        """Live: ``streaming.query_name``; replay: derived from the range and its targets.

        A re-run of the same replay into the same targets resumes its checkpoint; the same range
        into another Redis prefix or other output topics (another view version) is another query.
        """
        if self.query:
            return self.query
        if self.mode == "live":
            return cfg.streaming.query_name
        digest = hashlib.sha1(f"{self.starting}|{self.ending}|{sorted(self.sinks)}|"
                              f"{'|'.join(replay_targets(cfg, self.sinks))}".encode()).hexdigest()
        return f"{cfg.streaming.query_name}-replay-{digest[:10]}"


def replay_targets(cfg: KappaConfig, sinks: frozenset[str]) -> list[str]:
    """Where a run's effects go: the Redis prefix and the Kafka output topics of its sinks."""
    s = cfg.streaming
    targets = [f"redis:{s.redis_prefix}"] if REDIS in sinks else []
    if KAFKA in sinks:
        targets += [f"kafka:{topic}" for topic in (s.analyzed_topic, s.dlq_topic, s.summaries_topic)]
    return targets


@dataclass
class Report:
    """What a run did (the replay report; a live run's totals at stop)."""

    query: str
    mode: str
    batches: int
    records_read: int
    valid: int
    dead_lettered: int
    late: int
    written: dict[str, int]
    duration_s: float
    checkpoint: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)
