"""An idle service stops fetching (it and the broker stay near 0 % CPU) and wakes at once."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.integration.serve.support import SseReader, group_pids, rsvp, threads_cpu_s

# librdkafka's threads and the feed threads of this process; the broker's, except the one
# that rewrites its state file after writes (the test's own topic creation is a write).
CLIENT_THREADS = ("rdk:", "serve-feed")
BROKER_SNAPSHOT_THREAD = ("autosave",)
WINDOW_S = 3.0


def shares(broker: int) -> tuple[float, float]:
    """Cores used over WINDOW_S by this process's Kafka threads and by the broker."""

    def now() -> tuple[float, float]:
        return (threads_cpu_s(os.getpid(), CLIENT_THREADS),
                sum(threads_cpu_s(pid, skip=BROKER_SNAPSHOT_THREAD) for pid in group_pids(broker)))

    before, began = now(), time.monotonic()
    time.sleep(WINDOW_S)
    after, elapsed = now(), time.monotonic() - began
    client, server = ((b - a) / elapsed for a, b in zip(before, after, strict=True))
    return client, server


def test_idle_service_and_broker_stay_quiet_and_wake_fast(start_serve, sender, serve_topics, stack):
    broker = int((Path(stack.stack.data_dir) / "kafka.pid").read_text().split()[0])
    baseline = shares(broker)  # whatever else of the session runs (it cancels out)
    server = start_serve()
    client = SseReader(f"{server.url}/api/v1/stream?stream=analyzed")
    client.wait_for(lambda r: r.of("status"))
    time.sleep(1.0)  # the feeds' first empty polls
    service, broker_share = (idle - base for idle, base in zip(shares(broker), baseline, strict=True))
    assert service < 0.05 and broker_share < 0.05, (
        f"idle: the service's Kafka threads used {service:.0%} of a core more, the broker "
        f"{broker_share:.0%} more, than without the service")
    latencies = []
    for n in range(3):  # each record after an idle spell
        sent = time.time()
        sender.send(serve_topics["analyzed"], [rsvp(n)])
        client.wait_for(lambda r, count=n + 1: len(r.of("rsvp")) == count)
        latencies.append(client.of("rsvp")[-1].received - sent)
        time.sleep(0.5)
    assert sorted(latencies)[1] < 0.25, f"records after an idle spell took {latencies} s"
    client.stop()
