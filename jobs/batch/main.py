"""Entry point of the batch jobs for ``spark-submit`` (a file path, as spark-submit needs).

    spark-submit --master yarn --py-files var/dist/kappa-jobs.zip
        jobs/batch/main.py JOB --from 2026-01-01 --to 2026-01-08 --pipeline NAME   (one line)

It takes the arguments of ``kappa batch run`` (the same command, so the same checks and
report) and runs with the master spark-submit was given (jobs/streaming/main.py explains why).
``kappa batch submit`` builds this command (jobs/spark/submit.py).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Run ``kappa batch run`` with ``argv``; return the exit code (2 for bad arguments)."""
    import os

    from jobs.cli import main as kappa
    from jobs.streaming.main import submitted_master

    master = submitted_master()
    if master:
        os.environ["KAPPA_SPARK__MASTER"] = master
    return kappa(["batch", "run", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    # This folder holds a module called jobs.py: it must not shadow the ``jobs`` package.
    HERE = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != HERE]
    if (HERE.parents[1] / "conf" / "base.yaml").is_file():
        sys.path.insert(0, str(HERE.parents[1]))
    sys.exit(main())
