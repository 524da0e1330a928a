"""Exclusive advisory file locks that name their holder (the kernel drops them if it dies)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class LockHeld(Exception):
    """Another process holds the lock; ``holder`` is what it wrote into the file."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is held by {holder}")
        self.path = path
        self.holder = holder


def exclusive_lock(path: Path, stamp: str | None) -> int:
    """Take an exclusive non-blocking flock on ``path`` and return its fd (close it to release).

    ``stamp`` replaces the file's text (who holds it); None leaves the text as it is. Raises
    LockHeld with the holder's text when another open file already holds the lock.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 4096).decode(errors="replace").strip()
        os.close(fd)
        raise LockHeld(path, holder) from None
    if stamp is not None:
        os.ftruncate(fd, 0)
        os.write(fd, stamp.encode())
    return fd
