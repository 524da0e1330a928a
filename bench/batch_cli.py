"""Benchmark: `kappa batch run` as an operator or an Airflow task runs it, cold vs on the Spark service.

Writes ``--rows`` generated silver.rsvps rows over ``--days`` dates (bench/batch.py's lake) to a
temporary lake, then times whole ``kappa batch run JOB --from --to --json`` processes, start to
exit: ``--rounds`` times each job on a cold local Spark (``KAPPA_SPARK_SERVICE=off``: the JVM,
the SparkSession and the Python workers start in every process), then the same runs attached to a
Spark service (``kappa spark up``, its own start reported apart). Every run of a job must report
the same rows written. Prints JSON: per mode and job the wall seconds of each run, their median,
the service's start-up, the command and the date.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/batch_cli.py --rows 100000 --days 3 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.batch import START, generate  # noqa: E402

KAPPA = [sys.executable, "-m", "jobs.cli"]
JOBS = ("city_daily", "topic_daily", "event_stats")


def _kappa(env: dict[str, str], *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    began = time.monotonic()
    done = subprocess.run([*KAPPA, *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=900, check=False)
    if done.returncode != 0:
        raise SystemExit(f"kappa {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return time.monotonic() - began, done


def _runs(env: dict[str, str], first: date, end: date, rounds: int) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for job in JOBS:
        seconds, written = [], set()
        for _ in range(rounds):
            took, done = _kappa(env, "batch", "run", job, "--from", first.isoformat(), "--to",
                                end.isoformat(), "--json")
            seconds.append(round(took, 2))
            written.add(json.loads(done.stdout)[0]["rows_written"])
        if len(written) != 1:
            raise SystemExit(f"{job}: runs wrote different row counts {sorted(written)}")
        found[job] = {"seconds": seconds, "median_s": statistics.median(seconds),
                      "rows_written": written.pop()}
    return found


def run(rows: int, days: int, rounds: int) -> dict:
    """Write the lake, time the cold runs, start a service, time the attached runs; the figures."""
    from deltalake import write_deltalake

    from jobs.lake.delta import table_uri

    tables = generate(rows, days)
    first = START - timedelta(days=1)   # the generated dates and one empty date on each side
    with tempfile.TemporaryDirectory(prefix="kappa-bench-batch-cli-") as folder:
        root, data = str(Path(folder) / "lake"), str(Path(folder) / "stack")
        for name, table in tables.items():
            column = "dlq_date" if name == "ops.dlq" else "event_date"
            write_deltalake(table_uri(root, name), table, partition_by=[column])
        env = {**os.environ, "KAPPA_ENV": "test", "KAPPA_LAKE__ROOT": root, "KAPPA_STACK__DATA_DIR": data,
               "KAPPA_SPARK__MASTER": "local[2]", "SPARK_LOCAL_IP": "127.0.0.1"}
        end = START + timedelta(days=days + 1)
        cold = _runs({**env, "KAPPA_SPARK_SERVICE": "off"}, first, end, rounds)
        up_s, _ = _kappa(env, "spark", "up")
        try:
            attached = _runs(env, first, end, rounds)
        finally:
            _kappa(env, "spark", "down")
    for job in JOBS:
        if cold[job]["rows_written"] != attached[job]["rows_written"]:
            raise SystemExit(f"{job}: cold and attached runs wrote different rows")
    return {"rows": rows, "days": days, "rounds": rounds, "cold": cold, "attached": attached,
            "service_start_s": round(up_s, 2),
            "speedup_median": {job: round(cold[job]["median_s"] / attached[job]["median_s"], 1)
                               for job in JOBS}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="silver rows (default 100,000)")
    parser.add_argument("--days", type=int, default=3, help="dates they spread over (default 3)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each job per mode (default 3)")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.days < 1 or args.rounds < 1:
        parser.error("--rows, --days and --rounds must be positive")
    result = run(args.rows, args.days, args.rounds)
    result |= {"command": "bench/batch_cli.py " + " ".join(sys.argv[1:] if argv is None else argv),
               "date": datetime.now(UTC).isoformat(timespec="seconds"),
               "load_avg_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
