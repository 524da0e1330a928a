"""The executor write path: executors validate and write the data files, the driver commits.

On a cluster the driver must not receive every row. ``mapInArrow`` runs on the executors: each
task cuts its rows into chunks of at most ``loader.executor_chunk_rows``, runs the per-row rules
of the table's suite on each chunk (jobs/loader/chunks.py) and writes the chunk's rows as
Parquet files under the table (one per partition value, Delta's ``<column>=<value>/`` layout,
partition columns left out of the file, with Delta stats: jobs/loader/files.py). Under policy
``quarantine`` the failing rows go to files under the quarantine table; under ``fail`` a chunk
with failing rows writes nothing (the batch will fail). A task returns small rows only: one per
written file (path, size, partition values, records) and one per rule and chunk (counts,
extremes). The driver combines them into
the batch's verdict and commits the files' add actions with the Kafka offsets in one Delta
transaction (:func:`jobs.lake.delta.commit_files`). Files no commit references (a failed
batch, a failed or speculative task attempt, a commit that lost a conflict) are orphans that
``kappa maintain`` removes (a full vacuum, once they are older than the retention).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.config.load import KappaConfig
from jobs.loader.chunks import executor_unready
from jobs.loader.files import write_files
from jobs.loader.suites import Rule
from jobs.loader.tables import TableSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

REPORT_SCHEMA = pa.schema([
    ("kind", pa.string()), ("path", pa.string()), ("size", pa.int64()), ("partition_values", pa.string()),
    ("records", pa.int64()), ("rule", pa.int32()), ("success", pa.bool_()), ("element_count", pa.int64()),
    ("unexpected_count", pa.int64()), ("rows_named", pa.bool_()), ("extreme", pa.string()),
    ("stats", pa.string()),
])
REPORT_DDL = ("kind string, path string, size long, partition_values string, records long, rule int, "
              "success boolean, element_count long, unexpected_count long, rows_named boolean, "
              "extreme string, stats string")
DATA, QUARANTINE, RULE, GOOD = "data", "quarantine", "rule", "good"
DAEMON_MODULE = "jobs.loader.daemon"


@dataclass(frozen=True)
class TaskPlan:
    """What every executor task needs (pickled into the tasks).

    Attributes:
        table: the table's name (GX suite names).
        uri: where its data files go.
        quarantine_uri: where failing rows' files go (policy ``quarantine``).
        partition_by: the table's partition columns.
        rules: the table's suite, built once on the driver.
        policy: ``fail`` or ``quarantine``.
        run_id: recorded with quarantined rows.
        chunk_rows: rows validated and written at a time.
        keys: when set, rows arrive hash-partitioned and sorted by these columns and a chunk is
            cut only where they change (the unique rule on the key is measured per chunk).
        storage: the lake's storage options (an S3 lake's endpoint and region; no credentials).
    """

    table: str
    uri: str
    quarantine_uri: str
    partition_by: tuple[str, ...]
    rules: tuple[Rule, ...]
    policy: str
    run_id: str
    chunk_rows: int
    keys: tuple[str, ...] = ()
    storage: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Written:
    """What the executors did: files written per table, and the rules' chunk reports."""

    data: list[dict]
    quarantine: list[dict]
    reports: list[dict]
    good: list[dict] = field(default_factory=list)

    @property
    def rows(self) -> int:
        """The batch's rows that passed.

        Counted from the data files, or apart on an executor merge, whose files also hold the
        stored rows it rewrote.
        """
        return sum(item["records"] for item in self.good or self.data)

    @property
    def quarantined(self) -> int:
        """Rows in the quarantine files."""
        return sum(item["records"] for item in self.quarantine)


def choose_write_path(cfg: KappaConfig, spec: TableSpec, rules: Sequence[Rule], records: int,
                      record_bytes: float | None = None) -> tuple[str, str]:
    """``driver`` or ``executors`` for a batch of ``records`` offsets, and why (docs/tables.md).

    ``record_bytes`` is the mean Kafka size of the batch's records (a sample's, or None when
    unknown): ``auto`` sends a batch over ``loader.driver_path_max_bytes`` to the executors, since
    the driver's memory follows the bytes collected, not the rows.
    """
    setting, master = cfg.loader.write_path, cfg.spark.master
    unready = executor_unready(list(rules), spec.keys)
    if unready:
        return "driver", f"rules {unready} need the whole batch at once"
    if setting != "auto":
        return setting, f"loader.write_path={setting}"
    if _cluster(master):
        return "executors", f"spark.master={master} is a cluster"
    limit, budget = cfg.loader.driver_path_max_rows, cfg.loader.driver_path_max_bytes
    if records > limit:
        return "executors", f"{records} records > loader.driver_path_max_rows={limit}"
    size = records * (record_bytes or 0)
    if size > budget:
        return "executors", (f"{records} records of about {record_bytes:.0f} bytes ({size:.0f} bytes) > "
                             f"loader.driver_path_max_bytes={budget}")
    return "driver", (f"{records} records <= loader.driver_path_max_rows={limit}, about {size:.0f} bytes <= "
                      f"loader.driver_path_max_bytes={budget}")


def driver_batch_records(cfg: KappaConfig, record_bytes: float | None) -> int:
    """The most records of one driver-path batch.

    ``driver_path_max_rows``, and no more than fit ``driver_path_max_bytes`` at ``record_bytes``
    each (at least one).
    """
    limit = cfg.loader.driver_path_max_rows
    if not record_bytes:
        return limit
    return max(1, min(limit, int(cfg.loader.driver_path_max_bytes // record_bytes)))


def worker_conf(cfg: KappaConfig) -> dict[str, str]:
    """Spark settings of the loader's session (GX preloaded in the executors' worker daemon).

    Where batches will likely take the executor path (``write_path: executors``, or ``auto`` on
    a cluster), the executors' Python workers are forked from jobs/loader/daemon.py, which has
    imported Great Expectations once; elsewhere the daemon stays pyspark's (a driver-path run
    would pay the import for nothing).
    """
    setting = cfg.loader.write_path
    likely = setting == "executors" or (setting == "auto" and _cluster(cfg.spark.master))
    return {"spark.python.daemon.module": DAEMON_MODULE} if likely else {}


def loader_spark(cfg: KappaConfig, app_name: str) -> SparkSession:
    """The SparkSession of a load (``kappa load``, the Airflow load tasks, bench/loader_paths.py)."""
    from jobs.spark.session import build_spark

    return build_spark(cfg, app_name, extra_conf=worker_conf(cfg))


def _cluster(master: str) -> bool:
    return master != "local" and not master.startswith("local[")


def write_on_executors(frame: DataFrame, plan: TaskPlan) -> Written:
    """Run the tasks; return their file and rule reports (small: no data rows reach the driver)."""
    return written(row.asDict() for row in keyed(frame, plan).mapInArrow(_task(plan), REPORT_DDL).collect())


def keyed(frame: DataFrame, plan: TaskPlan) -> DataFrame:
    """``frame`` hash-partitioned and sorted by ``plan.keys`` (as it is when there are none)."""
    return frame.repartition(*plan.keys).sortWithinPartitions(*plan.keys) if plan.keys else frame


def written(reports: Iterable[dict]) -> Written:
    """The tasks' reports sorted by kind."""
    by_kind: dict[str, list[dict]] = {DATA: [], QUARANTINE: [], RULE: [], GOOD: []}
    for report in reports:
        by_kind[report["kind"]].append(report)
    return Written(by_kind[DATA], by_kind[QUARANTINE], by_kind[RULE], by_kind[GOOD])


def add_actions(files: list[dict]) -> list[Any]:
    """Delta add actions of files written by the executors."""
    from deltalake.transaction import AddAction

    now_ms = int(time.time() * 1000)
    return [AddAction(item["path"], item["size"], json.loads(item["partition_values"]), now_ms, True,
                      item.get("stats") or json.dumps({"numRecords": item["records"]})) for item in files]


def arrow_schema(frame: DataFrame) -> pa.Schema:
    """The Arrow schema the executors write (Spark's own conversion, timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(frame.schema, timezone="UTC")


def quarantine_schema(schema: pa.Schema) -> pa.Schema:
    """A table's schema plus the quarantine columns (``quality.split_rows``)."""
    return schema.append(pa.field("failed_expectations", pa.string())).append(
        pa.field("quarantine_run_id", pa.string()))


def _task(plan: TaskPlan) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for chunk in chunks(batches, plan.chunk_rows, plan.keys):
            reports, good = check(plan, chunk)
            if good is not None:
                files = write_files(plan.uri, good, plan.partition_by, plan.storage)
                reports += [{"kind": DATA, **item} for item in files]
            yield pa.RecordBatch.from_pylist(reports, schema=REPORT_SCHEMA)

    return run


def chunks(batches: Iterator[pa.RecordBatch], size: int, keys: Sequence[str] = ()) -> Iterator[pa.Table]:
    """``batches`` regrouped into tables of about ``size`` rows.

    With ``keys`` (rows sorted by them) a table ends only where the key changes, so every row of
    a key lies in one table.
    """
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        pending.append(batch)
        count += batch.num_rows
        if count < size:
            continue
        table = pa.Table.from_batches(pending)
        cut = _last_key_start(table, keys) if keys else table.num_rows
        if cut:
            yield table.slice(0, cut)
            rest = table.slice(cut)
            pending, count = rest.to_batches(), rest.num_rows
    if count:
        yield pa.Table.from_batches(pending)


def _last_key_start(table: pa.Table, keys: Sequence[str]) -> int:
    """Where the last run of equal keys starts (0: the whole table is one key)."""
    import numpy as np
    import pyarrow.compute as pc

    changed = np.zeros(table.num_rows - 1, dtype=bool)
    for key in keys:
        column = table[key]
        differs = pc.not_equal(column.slice(1), column.slice(0, table.num_rows - 1))
        changed |= pc.fill_null(differs, False).to_numpy(zero_copy_only=False)  # null: no cut
    starts = np.flatnonzero(changed)
    return int(starts[-1]) + 1 if starts.size else 0


def check(plan: TaskPlan, rows: pa.Table) -> tuple[list[dict], pa.Table | None]:
    """Run the chunked rules on ``rows``; return the reports and the good rows.

    Failing rows go to quarantine files (policy ``quarantine``); under ``fail`` a chunk with
    failing rows returns None for the good rows (the batch fails: write nothing).
    """
    from jobs.loader.chunks import chunk_report
    from jobs.loader.quality import split_rows

    reports, reasons = chunk_report(plan.table, list(plan.rules), rows, plan.keys)
    out = [{"kind": RULE, **report} for report in reports]
    if reasons and plan.policy == "fail":
        return out, None  # the batch fails: its files would only be orphans
    good, bad = split_rows(rows, reasons, plan.run_id)
    out += [{"kind": QUARANTINE, **item} for item in write_files(plan.quarantine_uri, bad, (), plan.storage)]
    return out, good
