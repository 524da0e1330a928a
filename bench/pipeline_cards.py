"""The card pipeline on the engine against a hand-written loop doing the same work.

The card pipeline (pipelines/cards) copied under a name of its own (a temporary folder on
``KAPPA_PIPELINES_PATH``: its own topics and prefix, as tests/integration/pipelines copy it),
its source topic filled with generated transactions (pipelines/cards/generator.py, Kafka key =
card id; event times shifted so that the last is before the produce, none too far ahead). Each
round, alternating, every system as a process of its own timed from start to exit:

- ``engine_cold``: ``kappa pipelines run <copy> --mode replay --to latest --fresh --json`` (sinks
  kafka and redis: decisions, dead letters, the views, keyed state and fence in the fenced apply),
  its own Spark (``KAPPA_SPARK_SERVICE=off``), a fresh prefix, query and output suffix per run;
  ``run_s`` = the run's own ``duration_s``, start-up = wall - run_s.
- ``loop``: bench/pipeline_cards_loop.py, one process: the same rules (``pipelines.cards.rules``),
  the previous use from a dict, the decisions produced, the views written by hand, pipelined.
- ``loop_no_redis``: the same loop, decisions and dead letters only.

Workloads (``--workloads``): ``many`` (``--cards`` ordinary cards, default 50,000, the generator's
Zipf-like skew, plus one card per planted pair) and ``hot`` (``--hot-cards``, default 20).
Per run: wall s, records/s over the wall, peak RSS and CPU (bench/replay_cli.py ``timed``), the
counts; per round the ratios engine / loop. Everything created is deleted at the end. Prints JSON.

    .venv/bin/python bench/pipeline_cards.py --records 200000 --rounds 2
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from types import SimpleNamespace
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Producer
from replay_cli import forget, loop_timing, timed
from streaming_cpu import settle
from streaming_support import drop_topics, exit_on_sigterm, new_topic

from jobs.config.load import PROJECT_ROOT, load_config
from jobs.kafka.client import producer_config
from jobs.streaming.state import checkpoint_path
from pipelines.cards import generator

sys.path.insert(0, str(PROJECT_ROOT))
from tests.integration.pipelines.cards_support import copy_cards

PARTITIONS = 3
LOG_LINE = re.compile(r"(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO ")
MAX_STEP_MS = 30_000  # the generator's stream clock: at most this per item
WORKLOADS = ("many", "hot")


class _SummedRandom(random.Random):
    """``random.Random`` whose ``choices(population, weights)`` keeps the running sums of the last
    ``weights`` list: the generator draws each card with ``rng.choices(ids, weights)``, which sums
    every card's weight per draw (O(cards): 29 s per 5,000 items at 50,000 cards); the draws, and so
    the items, are the same."""

    _sums: tuple[Any, list[float]] | None = None

    def choices(self, population: Any, weights: Any = None, *, cum_weights: Any = None,
                k: int = 1) -> list[Any]:
        if weights is not None and cum_weights is None:
            if self._sums is None or self._sums[0] is not weights:
                self._sums = (weights, list(itertools.accumulate(weights)))
            weights, cum_weights = None, self._sums[1]
        return super().choices(population, weights, cum_weights=cum_weights, k=k)


def fill(props: dict[str, str], topic: str, records: int, cards: int, seed: int) -> dict[str, Any]:
    """Produce ``records`` generated transactions keyed by card (the default partitioner, as
    ``kappa pipelines produce``); event times end before now, so none is ahead of its Kafka time."""
    start_ms = int(time.time() * 1000) - (records + 1) * MAX_STEP_MS - 3_600_000
    producer = Producer({**producer_config(props), "queue.buffering.max.messages": 1_000_000})
    kinds: dict[str, int] = {}
    began = time.monotonic()
    with (mock.patch.object(generator, "random", SimpleNamespace(Random=_SummedRandom)),
          mock.patch.object(generator, "START_MS", start_ms)):
        for item in generator.generate(records, seed, cards=cards, malformed_rate=0.01):
            kind = item.kind.split(":")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
            while True:
                try:
                    producer.produce(topic, item.value.encode(), item.key.encode() if item.key else None)
                    break
                except BufferError:
                    producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError("could not flush the transactions in 300 s")
    return {"produce_s": round(time.monotonic() - began, 1), "kinds": kinds}


def engine_run(env: dict[str, str], props: dict[str, str], name: str, records: int) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:8]
    prefix, query = f"bench{run_id}", f"bench-{run_id}"
    outputs = [f"{name}.analyzed.{run_id}", f"{name}.dlq.{run_id}"]
    try:
        result = timed([sys.executable, "-m", "jobs.cli", "-v", "pipelines", "run", name, "--mode", "replay",
                        "--to", "latest", "--fresh", "--sinks", "kafka,redis", "--prefix", prefix,
                        "--query", query, "--output-suffix", run_id, "--json"], env, keep_stderr=True)
    finally:
        forget(props, outputs, prefix)
        checkpoint = checkpoint_path(load_config().lake.checkpoint_root, query)
        shutil.rmtree(checkpoint, ignore_errors=True)
        for side in (".lock", ".fingerprint.json"):  # the files beside it (jobs/streaming/state.py)
            checkpoint.with_name(checkpoint.name + side).unlink(missing_ok=True)
    report = json.loads(result.pop("last"))
    assert report["input_rows"] == records, report
    result |= phases(result.pop("stderr"))
    startup = round(result["wall_s"] - report["duration_s"], 2)
    return result | {"run_s": report["duration_s"], "startup_s": startup,
                     "records_per_s": round(records / result["wall_s"]), "batches": report["batches"],
                     "valid": report["valid_rows"], "dlq": report["dlq_rows"], "late": report["late_rows"]}


def phases(stderr: str) -> dict[str, Any]:
    """From the run's INFO log: its batches' own time (``batch ... elapsed_ms=``) and the time from
    taking the query's lease (the start of ``duration_s``) to the first batch's start (the Spark
    session, the query's start, the source's first plan)."""
    stamps: dict[str, float] = {}
    batches: list[float] = []
    for line in stderr.splitlines():
        found = LOG_LINE.match(line)
        if found is None:
            continue
        at = datetime.strptime(found["at"], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC).timestamp()
        if " lease query=" in line:
            stamps.setdefault("lease", at)
        elif " batch query=" in line:
            elapsed = int(line.rsplit("elapsed_ms=", 1)[1].split()[0]) / 1000
            batches.append(elapsed)
            stamps.setdefault("first_batch", at - elapsed)
    out: dict[str, Any] = {"batches_s": [round(b, 2) for b in batches]}
    if "lease" in stamps and "first_batch" in stamps:
        out["to_first_batch_s"] = round(stamps["first_batch"] - stamps["lease"], 2)
    return out


def loop_run(env: dict[str, str], props: dict[str, str], name: str, records: int,
             views: bool = True) -> dict[str, Any]:
    outputs = [new_topic(props, PARTITIONS), new_topic(props, 1)]
    prefix = f"bench{uuid.uuid4().hex[:8]}" if views else None
    command = [sys.executable, str(Path(__file__).with_name("pipeline_cards_loop.py")), "--source",
               f"{name}.raw", "--partitions", str(PARTITIONS), "--records", str(records),
               "--decisions", outputs[0], "--dlq", outputs[1], *(["--prefix", prefix] if prefix else [])]
    try:
        result = timed(command, env)
    finally:
        forget(props, outputs, prefix)
    report, timing = loop_timing(result, records)
    return result | timing | {k: report[k] for k in ("valid", "dlq", "late", "flagged", "cards")}


def loop_no_redis_run(env: dict[str, str], props: dict[str, str], name: str, records: int) -> dict[str, Any]:
    """The loop without the views: decisions and dead letters only."""
    return loop_run(env, props, name, records, views=False)


def workload(args: argparse.Namespace, env: dict[str, str], props: dict[str, str], root: Path,
             cards: int) -> dict[str, Any]:
    """Copy the pipeline, fill its source, run the systems ``--rounds`` times alternating."""
    folder, name = copy_cards(root)
    from jobs.engine.run import ensure_topics
    from jobs.pipelines.registry import load

    spec = load(folder).spec
    assert spec is not None
    ensure_topics(load_config(), spec)
    try:
        filled = fill(props, f"{name}.raw", args.records, cards, seed=7)
        settle()
        systems: list[Callable[..., dict[str, Any]]] = [engine_run, loop_run, loop_no_redis_run]
        rounds = []
        for index in range(args.rounds):
            order = systems[index % len(systems):] + systems[:index % len(systems)]
            runs: dict[str, Any] = {}
            for fn in order:
                load_1m = round(os.getloadavg()[0], 2)
                runs[fn.__name__.removesuffix("_run")] = fn(env, props, name, args.records) | {
                    "load_1m_before": load_1m}
            engine = runs["engine"]
            for baseline in ("loop", "loop_no_redis"):
                runs[f"engine_vs_{baseline}"] = round(
                    engine["records_per_s"] / runs[baseline]["records_per_s"], 2)
            rounds.append(runs)
    finally:
        drop_topics(props, list(spec.topics()))
    return {"cards": cards, "pipeline_copy": name, **filled, "rounds": rounds,
            **{f"median_engine_vs_{b}": median(r[f"engine_vs_{b}"] for r in rounds)
               for b in ("loop", "loop_no_redis")},
            "median_engine_startup_s": median(r["engine"]["startup_s"] for r in rounds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cards", type=int, default=50_000, help="ordinary cards of the many workload")
    parser.add_argument("--hot-cards", type=int, default=20, help="ordinary cards of the hot workload")
    parser.add_argument("--workloads", default="many", help=f"comma-separated: {', '.join(WORKLOADS)}")
    args = parser.parse_args()
    exit_on_sigterm()
    cfg = load_config()
    props = cfg.kafka.client_config()
    root = Path(tempfile.mkdtemp(prefix="bench-cards-"))
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "KAPPA_SPARK_SERVICE": "off",
           "PYSPARK_PYTHON": sys.executable, "KAPPA_PIPELINES_PATH": str(root)}
    out: dict[str, Any] = {"benchmark": "pipeline_cards", "records": args.records, "cores": os.cpu_count(),
                           "spark_master": cfg.spark.master, "workloads": {}}
    try:
        for name in args.workloads.split(","):
            cards = {"many": args.cards, "hot": args.hot_cards}[name]
            out["workloads"][name] = workload(args, env, props, root, cards)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
