"""kill -9 of ``kappa batch run`` while it writes the partition files, then a re-run: the table
holds each partition once (the replace is one Delta commit; files of the killed run are never
referenced)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import date, timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.conftest import KAPPA, REPO
from tests.integration.batch.support import silver_row, write_silver

pytestmark = pytest.mark.slow
HALF = 60   # the killed run writes a file per date into 60 new partition folders


def _parquet(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*.parquet")}


def _run(first: int, end: int) -> list[str]:
    start = date(2026, 1, 1)
    return [*KAPPA, "batch", "run", "city_daily", "--from", str(start + timedelta(days=first - 1)),
            "--to", str(start + timedelta(days=end - 1))]


def test_kill_9_mid_write_then_rerun_leaves_each_partition_once(kappa_env, tmp_path):
    root = tmp_path / "lake"
    rows = [silver_row(day * 100 + n, day, 9 + n % 12, city=f"C{n % 7}")
            for day in range(1, 2 * HALF + 1) for n in range(40)]
    write_silver(str(root), rows)
    env = {**os.environ, **kappa_env, "KAPPA_LAKE__ROOT": str(root)}
    first = subprocess.run(_run(1, HALF + 1), env=env, cwd=REPO, capture_output=True, text=True,
                           timeout=600, check=False)
    assert first.returncode == 0, first.stderr[-2000:]
    target = root / "gold" / "city_daily"
    before, folders = _parquet(target), len(os.listdir(target))

    process = subprocess.Popen(_run(HALF + 1, 2 * HALF + 1), env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:   # a new partition folder: the killed run is writing its files
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and process.poll() is None and len(os.listdir(target)) == folders:
            time.sleep(0.001)
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.wait(30)
    killed_at = DeltaTable(str(target)).version()
    print(f"killed with {len(_parquet(target) - before)} new files written; table version {killed_at}")

    if killed_at == 0:   # killed before its commit: its files are referenced by no version
        live = {Path(uri).relative_to(target).as_posix() for uri in DeltaTable(str(target)).file_uris()}
        assert live == before
    again = subprocess.run(_run(1, 2 * HALF + 1), env=env, cwd=REPO, capture_output=True, text=True,
                           timeout=600, check=False)
    assert again.returncode == 0, again.stderr[-2000:]
    table = DeltaTable(str(target))
    dates = [str(item["event_date"]) for item in table.to_pyarrow_table().to_pylist()]
    assert sorted(set(dates)) == [str(date(2026, 1, 1) + timedelta(days=d)) for d in range(2 * HALF)]
    assert len(dates) == 2 * HALF * 7   # 7 cities a day, each once
    partitions = [Path(uri).parent.name for uri in table.file_uris()]
    assert len(partitions) == len(set(partitions)) == 2 * HALF   # one live file per partition
