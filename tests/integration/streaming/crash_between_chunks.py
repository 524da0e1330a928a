"""``kappa`` with one fault: the whole job (driver, JVM, workers) is killed with SIGKILL right after
Redis made chunk ``KAPPA_TEST_CRASH_CHUNK`` of batch ``KAPPA_TEST_CRASH_BATCH``'s fenced apply and
before the next chunk (test_kill_restart.py). Run as
``python -m tests.integration.streaming.crash_between_chunks <kappa args>``.
"""

from __future__ import annotations

import os
import signal
import sys

from jobs.cli import main
from jobs.streaming import redis_script

CRASH_BATCH = os.environ["KAPPA_TEST_CRASH_BATCH"]
CRASH_CHUNK = int(os.environ["KAPPA_TEST_CRASH_CHUNK"])
_check = redis_script.FencedApply._check


def _check_with_fault(self: redis_script.FencedApply, index: int, marker: str, expect, **options):
    """Before the check of the chunk after ``CRASH_CHUNK``: that chunk's transaction is made."""
    if marker.split("/")[1] == CRASH_BATCH and index == CRASH_CHUNK + 1:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    return _check(self, index, marker, expect, **options)


redis_script.FencedApply._check = _check_with_fault  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
