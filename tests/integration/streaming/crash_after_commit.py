"""``kappa`` with one fault: the whole job (driver, JVM, workers) is killed with SIGKILL right
after Spark commits batch ``KAPPA_TEST_CRASH_BATCH`` and before its Redis effects are applied
(test_kill_restart.py). Run as ``python -m tests.integration.streaming.crash_after_commit <kappa args>``.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from jobs.cli import main
from jobs.streaming import applier

CRASH_BATCH = int(os.environ["KAPPA_TEST_CRASH_BATCH"])
_apply = applier.BackgroundApply._run


def _run(self: applier.BackgroundApply, effects: applier.BatchEffects) -> None:
    if effects.batch_id == CRASH_BATCH:
        commit = self.pending.path.parent.parent / "commits" / str(CRASH_BATCH)
        deadline = time.monotonic() + 120
        while not commit.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)  # let Spark finish writing the commit file it renamed into place
        os.killpg(os.getpgrp(), signal.SIGKILL)
    _apply(self, effects)


applier.BackgroundApply._run = _run  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
