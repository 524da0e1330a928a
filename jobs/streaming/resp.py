"""Commands to Redis as wire bytes, and their replies read in bulk: the fenced apply's transport.

A batch at high key cardinality makes about three commands per event (``HINCRBY``, ``HSET``,
``EXPIRE``), hundreds of thousands per batch. Sent through redis-py one by one, or as a Lua
script's ``redis.call``s, the per-command cost (Python on the client; the script's call path in
Redis, about 1.5 us each) decides the apply's speed. Here the events' commands are formatted
straight into RESP bytes, a transaction's worth sent with one ``sendall``, and the replies parsed
by hiredis from one buffer (docs/explanation/streaming-performance.md, "The Redis apply").
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import hiredis
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis

from jobs.streaming.aggregates import SUMS

FEED_BYTES = 16_384
"""Bytes handed to the hiredis reader at a time: it moves its unread buffer forward as replies are
taken, so a reader fed megabytes at once spends its time moving them (0.48 s for 100k replies
fed 1 MB at a time)."""


@dataclass(frozen=True)
class EntityHash:
    """A hash per entity: the increment rows of one ``kind`` (``item`` the entity's id).

    Each row's three sums (``n``, ``n2``, ``n3``) are added to the hash fields ``fields`` of
    ``<prefix><item>`` (``HINCRBY``, when not zero), its label set as the field ``label`` (``HSET``,
    when given), and the hash expires ``ttl`` seconds after its last write.
    """

    kind: str
    prefix: str
    ttl: int
    fields: tuple[str, str, str]
    label: str

    @property
    def read_fields(self) -> tuple[str, ...]:
        """The fields :func:`entity_reads` reads, in order: the sums' fields, then the label's."""
        return (*self.fields, self.label)


def pack(*args: str | int | bytes) -> bytes:
    """One command as RESP bytes."""
    return hiredis.pack_command(args)  # type: ignore[arg-type]


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def _bulks(values: pa.Array) -> pa.Array:
    """Each value as a RESP bulk string (its length in bytes, then the value), nulls kept."""
    text = values if pa.types.is_string(values.type) else pc.cast(values, pa.string())
    size = pc.cast(pc.binary_length(text), pa.string())
    return pc.binary_join_element_wise("$", size, "\r\n", text, "\r\n", "")


class EntityWrites:
    """The writes of entities' hashes as RESP bytes (:attr:`wire`) and how many commands they hold.

    ``events`` is a table of increment rows of the entity's kind (:class:`EntityHash`):
    ``HINCRBY`` of each non-zero sum, ``HSET`` of the label when given, ``EXPIRE`` of the hash.
    Formatted column-wise in Arrow: a few passes in C++, none per entity in Python.
    """

    def __init__(self, events: pa.Table, entity: EntityHash | None) -> None:
        self.events, self.entity = events, entity
        self.wire, self.commands = b"", 0
        if entity is None or not events.num_rows:
            return
        prefix, ttl = entity.prefix, entity.ttl
        key = _bulks(pc.binary_join_element_wise(prefix, _plain(events["item"]), ""))
        parts, counts = [], pa.array(np.ones(events.num_rows, dtype=np.int64))
        for name, column in zip(entity.fields, SUMS, strict=True):
            values = pc.fill_null(_plain(events[column]), 0)
            given = pc.not_equal(values, 0)
            if not pc.any(given).as_py():  # e.g. a sum that is zero in the whole chunk: no pass over it
                continue
            command = pc.binary_join_element_wise(
                "*4\r\n$7\r\nHINCRBY\r\n", key, _bulk(name.encode()).decode(), _bulks(values), "")
            parts.append(pc.if_else(given, command, ""))
            counts = pc.add(counts, pc.cast(given, pa.int64()))
        names = _plain(events["label"])
        named = pc.is_valid(names)
        hset = pc.binary_join_element_wise("*4\r\n$4\r\nHSET\r\n", key, _bulk(entity.label.encode()).decode(),
                                           _bulks(names), "")
        parts.append(pc.if_else(named, hset, ""))
        counts = pc.add(counts, pc.cast(named, pa.int64()))
        expire = _bulk(b"%d" % ttl).decode()
        parts.append(pc.binary_join_element_wise("*3\r\n$6\r\nEXPIRE\r\n", key, expire, ""))
        rows = pc.binary_join_element_wise(*parts, "")
        self.wire, self.commands = _values(rows), pc.sum(counts).as_py()

    def names(self) -> list[str]:
        """``"<command> <key>"`` of each command, in their order."""
        names: list[str] = []
        prefix = self.entity.prefix if self.entity is not None else ""
        for row in self.events.to_pylist():
            key = prefix + row["item"]
            names += [f"HINCRBY {key}" for column in SUMS if row[column]]
            names += [f"HSET {key}"] * (row["label"] is not None) + [f"EXPIRE {key}"]
        return names


def _plain(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One array of a column (its chunks joined), as the string kernels want it."""
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def entity_reads(ids: pa.Array, entity: EntityHash | None) -> bytes:
    """``HMGET <prefix><id> <fields> <label>`` of each entity, as RESP."""
    if entity is None or not len(ids):
        return b""
    key = _bulks(pc.binary_join_element_wise(entity.prefix, ids, ""))
    fields = "".join(_bulk(name.encode()).decode() for name in entity.read_fields)
    head = f"*{2 + len(entity.read_fields)}\r\n$5\r\nHMGET\r\n"
    rows = pc.binary_join_element_wise(head, key, fields, "")
    return _values(rows)


def _values(strings: pa.Array) -> bytes:
    """The values of a string array back to back: a slice of its data buffer."""
    _, offsets, data = strings.buffers()
    at = np.frombuffer(offsets, dtype=np.int32, count=len(strings) + 1, offset=4 * strings.offset)
    return data[int(at[0]):int(at[-1])].to_pybytes()


class Wire:
    """A connection of its own to a client's Redis, for RESP bytes out and many replies in.

    It is made as the client's pool makes its own (the same address, credentials, database and
    TLS), speaking RESP2.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._pool = client.connection_pool
        self._conn: Any = None

    def exchange(self, payload: bytes, replies: int) -> list[Any]:
        """Send ``payload`` and return its ``replies`` replies.

        An error reply comes as a ``hiredis.ReplyError`` in its place; a failure on the way drops
        the connection.
        """
        if not replies:
            return []
        reader = hiredis.Reader(encoding="utf-8", errors="replace")
        out: list[Any] = []

        def complete(data: bytes) -> bool:
            for start in range(0, len(data), FEED_BYTES):
                reader.feed(data, start, min(FEED_BYTES, len(data) - start))
                while len(out) < replies and (reply := reader.gets()) is not False:
                    out.append(reply)
            return len(out) == replies

        self._send(payload)
        self._receive(complete)
        return out

    def begin(self, body: bytes, commands: int, reads: int) -> Callable[[], Transaction]:
        """Send ``commands`` write commands then ``reads`` reads (``body``) as one ``MULTI``/``EXEC``.

        Returns what waits for Redis' answer (the caller can prepare its next chunk meanwhile).
        The writes' replies are not parsed one by one: the reply bytes are checked for an error
        reply, and only when one is there (or the transaction was refused) are they parsed.
        """
        token = uuid.uuid4().hex.encode()
        done = _bulk(token)
        got = bytearray()

        def complete(data: bytes) -> bool:
            got.extend(data)
            return got.endswith(done)

        self._send(b"".join([_MULTI, body, _EXEC, pack("ECHO", token)]))

        def finish() -> Transaction:
            self._receive(complete)
            return self._answer(bytes(got), commands, reads)

        return finish

    def _answer(self, data: bytes, commands: int, reads: int) -> Transaction:
        queued = _OK + _QUEUED * (commands + reads)
        clean = data.startswith(queued) and b"\r\n-" not in data
        if clean and data.startswith(_REFUSED, len(queued)):   # a WATCHed key changed: nothing made
            return Transaction(aborted=True)
        if clean and not reads:
            return Transaction(aborted=False)
        replies = _parse(data, commands + reads + 3)
        answer = replies[-2]
        if answer is None:
            return Transaction(aborted=True)
        if isinstance(answer, hiredis.ReplyError):
            raise redis.ResponseError(f"Redis refused the apply's transaction ({answer}); nothing of it "
                                      f"was made; first refusal: {next(r for r in replies if _error(r))}")
        refused = [] if clean else [(i, reply) for i, reply in enumerate(answer[:commands]) if _error(reply)]
        return Transaction(aborted=False, refused=refused, reads=answer[commands:])

    def _send(self, payload: bytes) -> None:
        if self._conn is None:   # RESP2: the reply shapes this module and its callers read
            conn = self._pool.connection_class(**{**self._pool.connection_kwargs, "protocol": 2})
            conn.connect()
            self._conn = conn
        with self._dropped_on_failure():
            self._conn._sock.sendall(payload)

    def _receive(self, complete: Callable[[bytes], bool]) -> None:
        with self._dropped_on_failure():
            sock = self._conn._sock
            while not complete(data := sock.recv(1 << 20)):
                if not data:
                    raise redis.ConnectionError("Redis closed the connection during the apply")

    @contextlib.contextmanager
    def _dropped_on_failure(self) -> Iterator[None]:
        """A failure half-way leaves replies unread on the connection: drop it."""
        try:
            yield
        except OSError as exc:
            self.close()
            raise redis.ConnectionError(f"Redis connection lost during the apply: {exc}") from exc
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Drop the connection (the next exchange opens another)."""
        if self._conn is not None:
            self._conn.disconnect()
            self._conn = None


@dataclass
class Transaction:
    """What :meth:`Wire.transaction` got back."""

    aborted: bool
    """Redis refused the transaction (a ``WATCH``ed key changed): nothing of it was made."""
    refused: list[tuple[int, Any]] = field(default_factory=list)
    """(position among the writes, error) of each write Redis refused."""
    reads: list[Any] = field(default_factory=list)
    """The reads' replies."""


_MULTI, _EXEC = pack("MULTI"), pack("EXEC")
_OK, _QUEUED = b"+OK\r\n", b"+QUEUED\r\n"
_REFUSED = b"*-1\r\n"
"""``EXEC``'s answer when Redis refused the transaction (RESP2's null array)."""


def _error(reply: Any) -> bool:
    return isinstance(reply, hiredis.ReplyError)


def _parse(data: bytes, replies: int) -> list[Any]:
    reader = hiredis.Reader(encoding="utf-8", errors="replace")
    out: list[Any] = []
    for start in range(0, len(data), FEED_BYTES):
        reader.feed(data, start, min(FEED_BYTES, len(data) - start))
        while (reply := reader.gets()) is not False:
            out.append(reply)
    return out[:replies]
