"""A real Prometheus with the shipped rules fires and resolves the streaming alerts of a live job.

Prometheus (Debian's package) scrapes `kappa metrics serve` every second; the rules are the
shipped file with only the `for:` values shortened. kill -9 of the live job fires
KappaStreamingJobDown; records produced while it is down fire KappaStreamLagGrowing; both resolve
when it runs again and catches up. A burst of malformed records fires KappaDeadLetterRateHigh,
which resolves once valid records bring the rate under 5%.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from jobs.monitoring.local import RULES, prometheus_config, start_prometheus, wait_ready
from pipelines.rsvp.generator import RsvpGenerator
from tests.conftest import KAPPA, REPO, free_port
from tests.integration.streaming.conftest import produce

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus is not installed "
                                 "(make setup runs scripts/ensure-prometheus.sh)")]


def firing(port: int) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=5) as response:
        alerts = json.loads(response.read())["data"]["alerts"]
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}


def wait_for(port: int, alert: str, present: bool, timeout_s: float, tick=None) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if tick is not None:
            tick()
        if (alert in firing(port)) == present:
            return time.monotonic() - start
        time.sleep(1)
    raise AssertionError(f"{alert} {'did not fire' if present else 'still fires'} within {timeout_s} s; "
                         f"firing: {firing(port)}")


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("a") as out:
        return subprocess.Popen([*KAPPA, *args], env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        proc.wait(timeout=60)


def test_job_down_lag_and_dead_letter_alerts_fire_and_resolve(stack, kappa_env, topic_factory,
                                                                redis_client, tmp_path):
    name = uuid.uuid4().hex[:8]
    topics = {key: topic_factory(partitions, key) for key, partitions in (
        ("source_topic", 3), ("analyzed_topic", 3), ("summaries_topic", 3), ("dlq_topic", 1),
        ("metrics_topic", 1), ("errors_topic", 1))}
    streaming = {**topics, "query_name": f"q-{name}", "redis_prefix": f"m{name}", "trigger_s": 0.5}
    exporter_port = free_port()
    env = {**os.environ, **kappa_env, "SPARK_LOCAL_IP": "127.0.0.1",
           "KAPPA_LAKE__CHECKPOINT_ROOT": str(tmp_path / "checkpoints"),
           "KAPPA_MONITORING__CACHE_S": "0.5", "KAPPA_MONITORING__PORT": str(exporter_port),
           **{f"KAPPA_STREAMING__{key.upper()}": str(value) for key, value in streaming.items()}}
    cfg = stack.model_copy(update={
        "streaming": stack.streaming.model_copy(update=streaming),
        "monitoring": stack.monitoring.model_copy(update={"port": exporter_port})})
    rules = tmp_path / "kappa.rules.yml"  # the shipped rules, `for:` shortened, nothing else
    rules.write_text(re.sub(r"(?m)^(\s+for:) \S+$", r"\1 3s", RULES.read_text()))
    prom_port = free_port()
    source, lines = topics["source_topic"], [g.line for g in RsvpGenerator(seed=5).generate(6_000)]
    procs: list[subprocess.Popen] = []
    try:
        procs.append(start(["metrics", "serve"], env, tmp_path / "exporter.log"))
        prometheus = start_prometheus(prometheus_config(cfg, None, rules, scrape_interval="1s"),
                                      tmp_path / "prometheus", prom_port)
        procs.append(prometheus)
        wait_ready(prom_port, prometheus, "prometheus", tmp_path / "prometheus" / "prometheus.log")
        produce(cfg, source, lines[:300])
        job = start(["stream", "run", "--mode", "live"], env, tmp_path / "job.log")
        procs.append(job)
        deadline = time.monotonic() + 180
        while int(redis_client.hget(f"m{name}:totals", "input") or 0) < 300:
            assert job.poll() is None, (tmp_path / "job.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the live job applied nothing in 180 s"
            time.sleep(1)

        time.sleep(4)  # a few evaluations of a running job with valid records: nothing fires
        watched = {"KappaStreamingJobDown", "KappaStreamLagGrowing", "KappaDeadLetterRateHigh"}
        assert not firing(prom_port) & watched
        produce(cfg, source, [b"{not json"] * 200 + lines[300:600])
        fired_dlq = wait_for(prom_port, "KappaDeadLetterRateHigh", True, 60)

        stop(job, signal.SIGKILL)
        fired_down = wait_for(prom_port, "KappaStreamingJobDown", True, 30)
        more = iter(range(600, 6_000, 150))
        fired_lag = wait_for(prom_port, "KappaStreamLagGrowing", True, 60,
                             tick=lambda: produce(cfg, source, lines[next(more, len(lines)):][:150]))

        job = start(["stream", "run", "--mode", "live"], env, tmp_path / "job.log")
        procs.append(job)
        resolved_down = wait_for(prom_port, "KappaStreamingJobDown", False, 180)
        resolved_lag = wait_for(prom_port, "KappaStreamLagGrowing", False, 120)
        resolved_dlq = wait_for(prom_port, "KappaDeadLetterRateHigh", False, 120,
                                tick=lambda: produce(cfg, source, lines[next(more, len(lines)):][:150]))
        print(json.dumps({"fired_dlq_s": fired_dlq, "fired_down_s": fired_down, "fired_lag_s": fired_lag,
                          "resolved_down_s": resolved_down, "resolved_lag_s": resolved_lag,
                          "resolved_dlq_s": resolved_dlq}))
    finally:
        for proc in reversed(procs):
            stop(proc)
        for key in redis_client.scan_iter(f"m{name}:*"):
            redis_client.delete(key)
