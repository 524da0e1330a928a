"""One driver per query across hosts: a lease in Redis, renewed while the query runs.

The lease of a query is the Redis key ``kappa-lease:<query>:<12 hex of the checkpoint
location>`` (the location as configured, made absolute: hosts sharing one checkpoint share one
lease; tests with their own checkpoint roots never meet). Its value names the holder (host,
pid, start time, a random nonce) and is the driver's token:

- take: ``SET key token NX PX ttl``; a key held by a dead process of this host (same host name,
  pid gone: a ``kill -9`` and a restart here) is taken over at once, compared and swapped;
- renew: every ``streaming.lease_renew_s`` on a thread, and at the start of every batch, with a
  compare-and-renew script (``SET key token XX PX ttl`` only while the value is still ours; a
  key Redis lost is taken again);
- release: compare-and-delete at exit.

A driver that finds its lease held by another token (it was paused or cut off from Redis for
longer than ``streaming.lease_ttl_s`` and another driver took over) raises :class:`LeaseLost`
before its next apply. The fenced apply (jobs/streaming/redis_script.py) still makes every
apply exact if two drivers ever overlap; the lease keeps the second one from running at all.
The host name is ``KAPPA_HOSTNAME`` when set, else the machine's (docs/streaming.md, "One
driver per query").
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from jobs.config.load import KappaConfig
from jobs.errors import ConfigError, KappaError
from jobs.host.processes import alive
from jobs.lake.statefs import Location
from jobs.streaming.state import AlreadyRunning, QueryLock

logger = logging.getLogger(__name__)

HOST_ENV = "KAPPA_HOSTNAME"
KEY_PREFIX = "kappa-lease"
RENEW = """
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then redis.call('SET', KEYS[1], ARGV[1], 'XX', 'PX', ARGV[2]) return 1 end
if not v then redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) return 2 end
return 0
"""
"""1: renewed; 2: the key was gone (Redis lost it) and is ours again; 0: another driver holds it."""
SWAP = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 end
return 0
"""
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class LeaseLost(KappaError):
    """Another driver took this driver's lease: it must not apply another batch."""

    exit_code = 3


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a lease, from its value, and how long it lasts unless renewed."""

    host: str
    pid: int
    since_ms: int
    expires_in_ms: int | None = None

    @classmethod
    def parse(cls, value: str | bytes | None, expires_in_ms: int | None = None) -> LeaseHolder:
        """The holder of a lease value (an unreadable or missing value: host ``?``)."""
        try:
            data = json.loads(value or "")
            return cls(str(data["host"]), int(data["pid"]), int(data["since_ms"]), expires_in_ms)
        except (ValueError, KeyError, TypeError):
            return cls("?", -1, 0, expires_in_ms)

    def describe(self) -> str:
        """``host H, pid N, since <UTC time>``."""
        since = datetime.fromtimestamp(self.since_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"host {self.host}, pid {self.pid}, since {since}"


def host_name() -> str:
    """This driver's host name in leases: ``KAPPA_HOSTNAME``, else the machine's."""
    return os.environ.get(HOST_ENV) or socket.gethostname()


def lease_key(checkpoint: Location | str, query: str) -> str:
    """The Redis key of the lease guarding a query's checkpoint."""
    location = str(checkpoint)
    if "://" not in location:
        location = os.path.abspath(location)
    return f"{KEY_PREFIX}:{query}:{hashlib.sha1(location.encode()).hexdigest()[:12]}"


def _client(cfg: KappaConfig) -> redis.Redis:
    return redis.Redis(**cfg.redis.client_kwargs(), decode_responses=True, socket_timeout=10)


def lease_holder(cfg: KappaConfig, checkpoint: Location | str, query: str) -> LeaseHolder | None:
    """Who runs a query by its lease (None: nobody, a dead process of this host, Redis out of reach)."""
    client = _client(cfg)
    key = lease_key(checkpoint, query)
    try:
        value, ttl = client.get(key), client.pttl(key)
    except redis.RedisError:
        return None
    finally:
        client.close()
    holder = None if value is None else LeaseHolder.parse(value, ttl if ttl >= 0 else None)
    if holder is not None and holder.host == host_name() and holder.pid > 0 and not alive(holder.pid):
        return None   # a driver of this host that died: its lease is only waiting to expire
    return holder


class QueryLease:
    """The lease of one query's driver: take, renew on a thread and per batch, release."""

    def __init__(self, cfg: KappaConfig, checkpoint: Location | str, query: str, stop_hint: str) -> None:
        s = cfg.streaming
        if s.lease_renew_s >= s.lease_ttl_s:
            raise ConfigError(f"streaming.lease_renew_s ({s.lease_renew_s}) must be below streaming."
                              f"lease_ttl_s ({s.lease_ttl_s}), or the lease expires between renewals")
        self.query, self.key, self.stop_hint = query, lease_key(checkpoint, query), stop_hint
        self.ttl_ms, self.renew_s = int(s.lease_ttl_s * 1000), s.lease_renew_s
        self.host, self.pid = host_name(), os.getpid()
        self.token = json.dumps({"host": self.host, "pid": self.pid, "since_ms": int(time.time() * 1000),
                                 "nonce": secrets.token_hex(8)})
        self.client = _client(cfg)
        self._renew = self.client.register_script(RENEW)
        self.lost: LeaseHolder | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        """Take the lease and start renewing it, or raise AlreadyRunning naming the holder."""
        if not self.client.set(self.key, self.token, nx=True, px=self.ttl_ms):
            self._take_over()
        logger.info("lease query=%s key=%s host=%s pid=%d ttl_s=%.0f", self.query, self.key, self.host,
                    self.pid, self.ttl_ms / 1000)
        self._thread = threading.Thread(target=self._renew_loop, name="kappa-lease", daemon=True)
        self._thread.start()

    def _take_over(self) -> None:
        """Take the lease from a dead driver of this host, or refuse naming the live holder."""
        value, ttl = self.client.get(self.key), self.client.pttl(self.key)
        if value is None and self.client.set(self.key, self.token, nx=True, px=self.ttl_ms):
            return   # expired meanwhile
        holder = LeaseHolder.parse(value, ttl if ttl >= 0 else None)
        # this host's pid gone (or ours: a restarted container keeps its host name and pid)
        dead_here = holder.host == self.host and holder.pid > 0 and (
            holder.pid == self.pid or not alive(holder.pid))
        if dead_here and self.client.register_script(SWAP)(keys=[self.key],
                                                           args=[value or "", self.token, self.ttl_ms]):
            logger.info("lease query=%s taken over from a dead driver (%s)", self.query, holder.describe())
            return
        expires = f"{holder.expires_in_ms / 1000:.0f} s" if holder.expires_in_ms is not None else "?"
        raise AlreadyRunning(
            f"query {self.query!r} already runs ({holder.describe()}; lease {self.key} expires in "
            f"{expires} unless renewed): {self.stop_hint}; if that driver is dead (its host down), "
            "start this one again once its lease expired (streaming.lease_ttl_s)")

    def check(self, batch_id: int | None = None) -> None:
        """Renew the lease now; raise LeaseLost if another driver holds it (before an apply).

        Redis out of reach: a warning, not an error (the apply that follows fails or is fenced).
        """
        if self.lost is None:
            try:
                self._renew_once()
            except redis.RedisError as exc:
                logger.warning("lease query=%s: could not renew (%s); the fence guards the apply",
                               self.query, exc)
        if self.lost is not None:
            before = f" before batch {batch_id}" if batch_id is not None else ""
            raise LeaseLost(
                f"query {self.query!r} lost its lease {self.key} to {self.lost.describe()} (this driver, "
                f"{self.host} pid {self.pid}, was paused or cut off from Redis for longer than "
                f"streaming.lease_ttl_s = {self.ttl_ms / 1000:.0f} s); it stops{before} and applies "
                "nothing more: the other driver continues the query")

    def _renew_once(self) -> None:
        if self._renew(keys=[self.key], args=[self.token, self.ttl_ms]) == 0:
            value = self.client.get(self.key)
            self.lost = LeaseHolder.parse(value)
            logger.error("lease query=%s lost to %s", self.query, self.lost.describe())

    def _renew_loop(self) -> None:
        while not self._stopping.wait(self.renew_s) and self.lost is None:
            try:
                self._renew_once()
            except redis.RedisError as exc:
                logger.warning("lease query=%s: could not renew (%s)", self.query, exc)

    def release(self) -> None:
        """Stop renewing and delete the lease if it is still ours."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.client.register_script(RELEASE)(keys=[self.key], args=[self.token])
        except redis.RedisError as exc:
            logger.warning("lease query=%s: not released (%s); it expires in %.0f s", self.query, exc,
                           self.ttl_ms / 1000)
        finally:
            self.client.close()


def hold_query(cfg: KappaConfig, checkpoint: Location, query: str,
               stop_hint: str) -> tuple[QueryLease, QueryLock]:
    """Take the query's lease (one driver on any host), then its local flock; raise AlreadyRunning.

    The flock stays, cheap, as this host's guard of the checkpoint folder itself (it also catches
    two configs that point one checkpoint at two Redis servers) and names the local pid that
    ``kappa stream stop`` and ``lock_holder`` report.
    """
    lease = QueryLease(cfg, checkpoint, query, stop_hint)
    lease.acquire()
    lock = QueryLock(checkpoint, query)
    try:
        lock.acquire()
    except BaseException:
        lease.release()
        raise
    return lease, lock
