"""Subprocess driver of the kill -9 test: stream a topic into one JSON file per batch id.

Each micro-batch is written atomically (temporary file, then rename) as ``batch-<id>.json``; a
replayed batch rewrites its own file, so the union of the files is what the sink kept.
Usage: python driver.py TOPIC CHECKPOINT OUT_DIR MAX_OFFSETS (config from KAPPA_* variables).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from jobs.config.load import load_config
from jobs.spark.kafka_io import read_kafka
from jobs.spark.session import build_spark


def main(argv: list[str] | None = None) -> int:
    topic, checkpoint, out_dir, max_offsets = (argv or sys.argv[1:])[:4]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config("test", environ=os.environ)
    spark = build_spark(cfg, app_name="kafka-kill-test")
    df = read_kafka(spark, cfg, topics=topic, stream=True, checkpoint=checkpoint,
                    options={"maxOffsetsPerTrigger": max_offsets})

    def write_batch(batch, batch_id: int) -> None:
        rows = [[r.partition, r.offset, bytes(r.value).decode()]
                for r in batch.select("partition", "offset", "value").collect()]
        tmp = out / f".batch-{batch_id}.tmp"
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, out / f"batch-{batch_id:06d}.json")

    query = (df.writeStream.foreachBatch(write_batch).option("checkpointLocation", checkpoint)
             .start())
    (out / "started").write_text(str(os.getpid()))
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
