"""``kappa`` with one fault: the whole job (driver, JVM, workers) is killed with SIGKILL right after
Redis made chunk ``KAPPA_TEST_CRASH_CHUNK`` of batch ``KAPPA_TEST_CRASH_BATCH``'s fenced apply and
before the next chunk (test_kill_restart.py). Run as
``python -m tests.integration.streaming.crash_between_chunks <kappa args>``.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from jobs.cli import main
from jobs.streaming import redis_script

CRASH_BATCH = os.environ["KAPPA_TEST_CRASH_BATCH"]
CRASH_CHUNK = int(os.environ["KAPPA_TEST_CRASH_CHUNK"])
_init = redis_script.FencedApply.__init__


def _init_with_fault(self: redis_script.FencedApply, *args, **kwargs) -> None:
    _init(self, *args, **kwargs)
    script = self._script

    def call(keys, args):
        reply = script(keys=keys, args=args)
        payload = json.loads(args[0])
        if payload["marker"].split("/")[1] == CRASH_BATCH and payload["chunk"] == CRASH_CHUNK:
            os.killpg(os.getpgrp(), signal.SIGKILL)
        return reply

    self._script = call  # type: ignore[method-assign]


redis_script.FencedApply.__init__ = _init_with_fault  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
