"""A query's stop on SIGTERM/SIGINT lasts as long as the query: the handlers before it come back."""

from __future__ import annotations

import os
import signal

import pytest

from jobs.streaming.waiting import stop_on_signals

pytestmark = pytest.mark.unit


def test_a_sigterm_during_the_block_sets_the_stop_and_the_old_handlers_come_back() -> None:
    got: list[int] = []

    def own(signum, frame) -> None:
        got.append(signum)

    before = {sig: signal.signal(sig, own) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with stop_on_signals() as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.wait(5), "SIGTERM during the query did not ask it to stop"
            assert got == [], "the caller's own handler ran during the query"
        assert signal.getsignal(signal.SIGTERM) is own
        assert signal.getsignal(signal.SIGINT) is own
        os.kill(os.getpid(), signal.SIGTERM)   # after the query: the caller's handler again
        assert got == [signal.SIGTERM]
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
