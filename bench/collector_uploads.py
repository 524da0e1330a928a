"""Peak RSS of a `kappa collect --http` process while many clients upload huge chunked bodies.

Concurrent large uploads must not be buffered whole (docs/collector.md). The collector runs with its
default limits and an unreachable broker (only the uploads run); prints one JSON line.

    .venv/bin/python bench/collector_uploads.py [--clients 24] [--mib 60]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
CHUNK = b'{"rsvp_id":1}\n' * 4681  # about 64 KiB of JSON lines


def _peak_mb(pid: int) -> int:
    return int(re.search(r"VmHWM:\s+(\d+)", Path(f"/proc/{pid}/status").read_text()).group(1)) // 1024


def _upload(url: str, mib: int, results: list, index: int) -> None:
    def body():
        for _ in range(mib * 16):
            yield CHUNK
    try:
        results[index] = httpx.post(url, content=body(), timeout=600,
                                    headers={"content-type": "application/x-ndjson"}).status_code
    except httpx.HTTPError as exc:
        results[index] = type(exc).__name__


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=24)
    parser.add_argument("--mib", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))  # bound, never listening: the broker is unreachable
        env = {**os.environ, "KAPPA_ENV": "test",
               "KAPPA_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{silent.getsockname()[1]}",
               "KAPPA_COLLECTOR__LOG_PATH": f"{folder}/log.sqlite"}
        output = Path(folder) / "collector.out"
        with output.open("wb") as sink:
            proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", "collect", "--http", "--port", "0"],
                                    cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            found = None
            while found is None and proc.poll() is None:
                time.sleep(0.1)
                found = re.search(r"listening on (http://[0-9.:]+)/rsvps", output.read_text())
            assert found is not None, output.read_text()
            time.sleep(1)
            before = _peak_mb(proc.pid)
            results: list = [None] * args.clients
            url = f"{found.group(1)}/rsvps"
            threads = [threading.Thread(target=_upload, args=(url, args.mib, results, i))
                       for i in range(args.clients)]
            started = time.monotonic()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.monotonic() - started
            statuses = {str(status): results.count(status) for status in set(results)}
            print(json.dumps({"clients": args.clients, "mib_each": args.mib, "rss_before_mb": before,
                              "peak_rss_mb": _peak_mb(proc.pid), "statuses": statuses,
                              "elapsed_s": round(elapsed, 1)}))
        finally:
            proc.terminate()
            proc.wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
