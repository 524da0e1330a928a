"""The query lease on the session's Redis: one holder, refusal naming it, take-over, loss, release."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import redis

from jobs.config.load import KappaConfig
from jobs.streaming.lease import LeaseHolder, LeaseLost, QueryLease, lease_holder, lease_key
from jobs.streaming.state import AlreadyRunning

HINT = "stop it there first"


@pytest.fixture()
def lease_cfg(stack: KappaConfig) -> KappaConfig:
    """Short leases, so that an expiry takes seconds."""
    streaming = stack.streaming.model_copy(update={"lease_ttl_s": 3.0, "lease_renew_s": 0.5})
    return stack.model_copy(update={"streaming": streaming})


def _client(cfg: KappaConfig) -> redis.Redis:
    return redis.Redis(**cfg.redis.client_kwargs(), decode_responses=True)


def test_a_second_driver_is_refused_naming_the_holder(lease_cfg, tmp_path, monkeypatch) -> None:
    checkpoint = tmp_path / "q"
    monkeypatch.setenv("KAPPA_HOSTNAME", "host-a")
    first = QueryLease(lease_cfg, checkpoint, "q", HINT)
    first.acquire()
    try:
        monkeypatch.setenv("KAPPA_HOSTNAME", "host-b")
        with pytest.raises(AlreadyRunning, match=r"query 'q' already runs \(host host-a, pid \d+, since "
                                                 r"20\d\d-.*stop it there first") as caught:
            QueryLease(lease_cfg, checkpoint, "q", HINT).acquire()
        assert caught.value.exit_code == 3
        holder = lease_holder(lease_cfg, checkpoint, "q")
        assert holder is not None and (holder.host, holder.pid) == ("host-a", first.pid)
    finally:
        first.release()
    assert lease_holder(lease_cfg, checkpoint, "q") is None


def test_the_lease_key_follows_the_checkpoint_location(tmp_path) -> None:
    assert lease_key(tmp_path / "q", "q") == lease_key(str(tmp_path / "q"), "q")
    assert lease_key(tmp_path / "one" / "q", "q") != lease_key(tmp_path / "two" / "q", "q")
    assert lease_key("s3://bucket/ckpt/q", "q").startswith("kappa-lease:q:")


def test_a_dead_driver_of_the_same_host_is_taken_over_at_once(lease_cfg, tmp_path, monkeypatch) -> None:
    checkpoint = tmp_path / "q"
    monkeypatch.setenv("KAPPA_HOSTNAME", "host-a")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    stale = json.dumps({"host": "host-a", "pid": int(dead.stdout), "since_ms": 1, "nonce": "x"})
    client = _client(lease_cfg)
    client.set(lease_key(checkpoint, "q"), stale, px=60_000)
    assert lease_holder(lease_cfg, checkpoint, "q") is None   # status: not running, only not expired
    lease = QueryLease(lease_cfg, checkpoint, "q", HINT)
    lease.acquire()   # no wait for the 60 s: its pid is gone from this host
    try:
        assert client.get(lease.key) == lease.token
    finally:
        lease.release()
        client.close()


def test_another_hosts_dead_driver_is_taken_over_once_its_lease_expired(lease_cfg, tmp_path,
                                                                        monkeypatch) -> None:
    checkpoint = tmp_path / "q"
    client = _client(lease_cfg)
    key = lease_key(checkpoint, "q")
    client.set(key, '{"host": "host-x", "pid": 1, "since_ms": 1, "nonce": "x"}', px=1500)
    monkeypatch.setenv("KAPPA_HOSTNAME", "host-b")
    with pytest.raises(AlreadyRunning, match="host host-x, pid 1"):
        QueryLease(lease_cfg, checkpoint, "q", HINT).acquire()
    client.pexpire(key, 1)
    while client.exists(key):   # expired: gone for every client from now on
        time.sleep(0.01)
    lease = QueryLease(lease_cfg, checkpoint, "q", HINT)
    lease.acquire()
    lease.release()
    client.close()


def test_a_driver_whose_lease_was_taken_stops_before_its_next_apply(lease_cfg, tmp_path) -> None:
    lease = QueryLease(lease_cfg, tmp_path / "q", "q", HINT)
    lease.acquire()
    client = _client(lease_cfg)
    try:
        lease.check(batch_id=1)   # ours: renewed
        assert 0 < client.pttl(lease.key) <= 3000
        client.set(lease.key, '{"host": "host-b", "pid": 7, "since_ms": 1, "nonce": "y"}', px=60_000)
        with pytest.raises(LeaseLost, match=r"lost its lease .* to host host-b, pid 7, .*before batch 2"):
            lease.check(batch_id=2)
    finally:
        lease.release()   # not ours: left to its holder
    assert LeaseHolder.parse(client.get(lease.key)).host == "host-b"
    client.delete(lease.key)
    client.close()


def test_a_lease_redis_lost_is_taken_again_by_its_driver(lease_cfg, tmp_path) -> None:
    lease = QueryLease(lease_cfg, tmp_path / "q", "q", HINT)
    lease.acquire()
    client = _client(lease_cfg)
    try:
        client.delete(lease.key)   # as a flushed or restarted Redis would
        lease.check(batch_id=3)
        assert client.get(lease.key) == lease.token
    finally:
        lease.release()
        client.close()
