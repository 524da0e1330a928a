"""SIGTERM/SIGINT handled for the length of a block, then handed back to what handled them before."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_signals_to(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """``handler`` answers SIGTERM and SIGINT while the block runs; the earlier handlers after it.

    Installed from the main thread only (Python delivers signals there); elsewhere the block runs
    with the process's handlers as they are.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)
