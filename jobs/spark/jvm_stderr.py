"""What of the Spark driver JVM's stderr reaches the operator (jobs/spark/session.py ``stderr_filtered``).

Every line passes on except two kinds, each an event no one can act on:

- the start-up lines every local JVM prints (``spark.JVM_NOISE``, matched line by line);
- the block-manager re-registration race of local Spark's executor heartbeat. When a heartbeat
  reaches the driver before it knows the executor's block manager (the first heartbeat of a slow
  start-up: the default interval is 10 s), the driver asks the block manager to re-register. That
  fails in local mode: before the block manager has an id with a NullPointerException
  (``"idWithoutTopologyInfo" is null``), after with the lookup of a ``CoarseGrainedScheduler``
  endpoint local mode does not have. Spark logs it twice with a stack trace (``ERROR Inbox:
  Ignoring error`` and ``WARN Executor: Issue communicating with driver in heartbeater``) and the
  next heartbeat succeeds. Only a log event with one of these two headers, a trace through the
  re-registration and one of these two causes is dropped; the same headers with any other trace
  (a heartbeat timing out, another endpoint failing) pass on.

An event with one of the two headers is held until its trace ends (the next line that is not a
trace line, or :data:`HOLD_S` without output), then passed on or dropped whole.
"""

from __future__ import annotations

import os
import re
import select
from typing import BinaryIO

LOG_EVENT = re.compile(rb"^\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} [A-Z]+ ")
"""The first line of a log event in the layout of jobs/spark/log4j2-driver.properties."""
TRACE_LINE = re.compile(
    rb"^(\s+at |\s+\.\.\. \d+ more|\s*Caused by: |\s*Suppressed: |[\w$.]+(Exception|Error)\b)")
"""A line of a Java stack trace: a frame, ``... N more``, a cause, or the exception's own line."""
RACE_HEADERS = (b" WARN Executor: Issue communicating with driver in heartbeater",
                b" ERROR Inbox: Ignoring error")
RACE_FRAMES = (b".BlockManager.reregister(", b".BlockManagerMasterEndpoint.org$apache$spark$storage$"
               b"BlockManagerMasterEndpoint$$register(")
RACE_CAUSES = (b'"idWithoutTopologyInfo" is null', b"Cannot find endpoint: spark://CoarseGrainedScheduler@")
HOLD_S = 0.5
READ_BYTES = 65536


class JvmStderr:
    """Line by line: what to pass on now (:meth:`feed`), and what a held event comes to (:meth:`release`)."""

    def __init__(self, noise: re.Pattern[str]) -> None:
        self.noise = noise
        self.held: list[bytes] = []

    @property
    def holding(self) -> bool:
        """Whether an event waits for the end of its trace."""
        return bool(self.held)

    def feed(self, line: bytes) -> list[bytes]:
        """The output due now that ``line`` (with its newline) came."""
        out: list[bytes] = []
        if self.held:
            if TRACE_LINE.match(line):
                self.held.append(line)
                return out
            out = self.release()
        if LOG_EVENT.match(line) and any(header in line for header in RACE_HEADERS):
            self.held = [line]
        elif not self.noise.match(line.decode(errors="replace")):
            out.append(line)
        return out

    def release(self) -> list[bytes]:
        """The held event whole, or nothing when it is the re-registration race."""
        block, self.held = b"".join(self.held), []
        if not block or (any(frame in block for frame in RACE_FRAMES)
                         and any(cause in block for cause in RACE_CAUSES)):
            return []
        return [block]


def pass_on(read_end: int, target: int, noise: re.Pattern[str]) -> None:
    """Copy the lines of ``read_end`` to ``target`` through :class:`JvmStderr` until the pipe ends.

    The pipe is drained to its end whatever happens: a writer to a full pipe nobody reads would
    block.
    """
    lines, rest = JvmStderr(noise), b""
    with os.fdopen(target, "wb", buffering=0) as out:
        try:
            while True:
                ready, _, _ = select.select([read_end], [], [], HOLD_S if lines.holding else None)
                if not ready:
                    _write(out, lines.release())
                    continue
                chunk = os.read(read_end, READ_BYTES)
                if not chunk:
                    break
                *complete, rest = (rest + chunk).split(b"\n")
                for line in complete:
                    _write(out, lines.feed(line + b"\n"))
            _write(out, [*lines.feed(rest), *lines.release()] if rest else lines.release())
        finally:
            os.close(read_end)


def _write(out: BinaryIO, chunks: list[bytes]) -> None:
    for chunk in chunks:
        try:
            out.write(chunk)
        except OSError:  # the real stderr is gone: keep draining
            return
