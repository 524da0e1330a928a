"""Fixtures for collector tests: collector subprocesses and per-test topics."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.integration.collector.support import KAPPA, CollectorProcess, listening_url, wait_ready


@pytest.fixture()
def start_collector(kappa_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., CollectorProcess]]:
    """Start `kappa collect --http` subprocesses; kill any still running at the end.

    The collector binds port 0 (any free port) unless told otherwise and the test reads the
    port it printed, so no other process can take the port between choosing and binding it.
    """
    started: list[CollectorProcess] = []

    def start(topic: str, dlq_topic: str, *, log_path: Path | None = None, port: int = 0,
              env: dict[str, str] | None = None, args: Sequence[str] = (), ready: bool = True
              ) -> CollectorProcess:
        log_path = log_path or tmp_path / f"log-{uuid.uuid4().hex[:6]}" / "log.sqlite"
        full_env = {**os.environ, **kappa_env, "KAPPA_COLLECTOR__LOG_PATH": str(log_path),
                    **(env or {})}
        output = tmp_path / f"collector-{len(started)}.out"
        with output.open("ab") as sink:
            proc = subprocess.Popen(
                [*KAPPA, "collect", "--http", "--port", str(port), "--topic", topic,
                 "--dlq-topic", dlq_topic, *args],
                env=full_env, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)
        collector = CollectorProcess(proc, "", log_path, output, full_env)
        started.append(collector)
        collector.url = listening_url(collector)
        if ready:
            wait_ready(collector)
        return collector

    yield start
    for collector in started:
        if collector.proc.poll() is None:
            collector.proc.kill()
            collector.proc.wait()


@pytest.fixture()
def topics(topic_factory) -> tuple[str, str]:
    """A fresh raw topic (3 partitions) and dead-letter topic (1 partition) for one test."""
    return topic_factory(3, prefix="raw"), topic_factory(1, prefix="dlq")
