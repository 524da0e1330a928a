"""Benchmark: the loader's write into Delta against a plain pyarrow.parquet write of the same rows.

Builds ``--records`` rsvps.raw-shaped Kafka rows in Spark (the Kafka read itself is measured by
bench/kafka_source.py), applies the bronze transform, and in the same run measures:
- driver path: ``toArrow()`` to the driver, then one delta-rs commit with app transactions;
- the same Arrow rows written with ``pyarrow.parquet`` (one file, and hive-partitioned by date);
- driver memory growth of ``toArrow()`` per row (the driver path's limit);
- files per partition after ``--batches`` small appends, and after ``kappa maintain`` compaction.

With ``--paths 100000,500000,1000000`` it measures instead the two write paths of ``kappa load``
end to end (bench/loader_paths.py: Kafka -> quality gate -> Delta, a fresh process per run,
rows/s and driver peak RSS). Prints one JSON object. Never run as a timed test.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/loader.py --records 500000
    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/loader.py --paths 100000,500000,1000000
    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/loader.py --paths 100000,500000 --table silver.rsvps
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from deltalake import DeltaTable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.config.load import load_config
from jobs.lake.delta import Commit, table_uri, write_delta
from jobs.loader.maintain import maintain_table
from jobs.loader.tables import LoadTarget, specs

BASE_MS = 1_767_225_600_000
DAYS = 3


def _kafka_frame(spark, records: int):
    from pyspark.sql import functions as F

    ids = spark.range(records, numPartitions=3)
    mtime = F.lit(BASE_MS) + (F.col("id") * (DAYS * 86_400_000 // records))
    value = F.to_json(F.struct(F.col("id").alias("rsvp_id"), mtime.alias("mtime"),
                               F.lit("yes").alias("response"), F.lit("x" * 150).alias("pad")))
    key = F.col("id").cast("string").cast("binary")
    return ids.select(key.alias("key"), value.cast("binary").alias("value"),
                      F.lit("rsvps.raw").alias("topic"), (F.col("id") % 3).cast("int").alias("partition"),
                      F.col("id").alias("offset"), F.current_timestamp().alias("timestamp"),
                      F.lit(0).alias("timestampType"))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(fn) -> tuple[Any, float]:
    began = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - began


def run(records: int, batches: int, root: Path) -> dict[str, Any]:
    from jobs.spark.session import build_spark

    cfg = load_config("test", environ={"KAPPA_LAKE__ROOT": str(root / "lake")})
    spark = build_spark(cfg, app_name="kappa-bench-loader")
    spec = specs(cfg)["bronze.rsvps_raw"]
    frame = _kafka_frame(spark, records).transform(spec.rows()).cache()
    frame.count()
    rss_before = _rss_mb()
    arrow, collect_s = _timed(frame.toArrow)
    rss_growth = _rss_mb() - rss_before
    size_mb = arrow.nbytes / 1e6
    uri = table_uri(str(root / "lake"), "bronze.rsvps_raw")
    commit = Commit({"bench/rsvps.raw/0": records})
    _, delta_s = _timed(lambda: write_delta(uri, arrow, snapshot=None, partition_by=spec.partition_by,
                                            commit=commit))
    _, parquet_s = _timed(lambda: pq.write_table(arrow, root / "plain.parquet"))
    _, hive_s = _timed(lambda: pq.write_to_dataset(arrow, root / "hive", partition_cols=["event_date"]))
    compaction = _compaction(cfg, frame, root, batches)
    spark.stop()

    def rate(seconds: float) -> dict[str, float]:
        return {"rows_per_s": round(records / seconds), "mb_per_s": round(size_mb / seconds, 1),
                "seconds": round(seconds, 3)}

    return {
        "records": records, "arrow_mb": round(size_mb, 1),
        "driver_collect_toArrow": rate(collect_s),
        "delta_write_driver_path": rate(delta_s),
        "parquet_write_single_file": rate(parquet_s),
        "parquet_write_partitioned": rate(hive_s),
        "delta_vs_parquet_single": round(parquet_s / delta_s, 3),
        "delta_vs_parquet_partitioned": round(hive_s / delta_s, 3),
        "driver_path_total": rate(collect_s + delta_s),
        "driver_rss_growth_mb": round(rss_growth, 1),
        "driver_bytes_per_row": round(rss_growth * 1e6 / records, 1) if rss_growth > 0 else None,
        "compaction": compaction,
    }


def _compaction(cfg, frame, root: Path, batches: int) -> dict[str, Any]:
    spec = specs(cfg)["bronze.rsvps_raw"]
    uri = table_uri(str(root / "lake"), "bronze.compaction")
    for piece in frame.randomSplit([1.0] * batches, seed=7):
        write_delta(uri, piece.toArrow(), snapshot=None if not Path(uri).exists() else DeltaTable(uri),
                    partition_by=spec.partition_by)
    target = LoadTarget(spec, "rsvps.raw", "fail", uri)
    report = maintain_table(cfg, target, retention_h=cfg.loader.vacuum_floor_h, dry_run=False)
    return {"batches": batches, "files_per_partition_before": report["files_per_partition_before"],
            "files_per_partition_after": report["files_per_partition_after"],
            "bytes_before": report["bytes_before"], "bytes_after": report["bytes_after"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--batches", type=int, default=8, help="small appends before compaction")
    parser.add_argument("--paths", help="comma-separated sizes: compare kappa load's write paths")
    parser.add_argument("--table", default="bronze.rsvps_raw", choices=["bronze.rsvps_raw", "silver.rsvps"],
                        help="with --paths: the table loaded (silver.rsvps: a merge, in two loads)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one measured run (bench/loader_paths.py)
    args = parser.parse_args(argv)
    if args.paths or args.child:
        from bench.loader_paths import main as paths_main

        return paths_main(args.paths, args.child, args.table)
    with tempfile.TemporaryDirectory(prefix="kappa-bench-loader-") as folder:
        result = run(args.records, args.batches, Path(folder))
    result["command"] = "SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/loader.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
