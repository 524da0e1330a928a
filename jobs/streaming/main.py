"""Entry point of the streaming job for ``spark-submit`` (a file path, as spark-submit needs).

    spark-submit --master spark://host:7077 --py-files var/dist/kappa-jobs.zip
        jobs/streaming/main.py --mode replay --from earliest --to latest   (one line)

It takes the options of ``kappa stream run`` (the same command, so the same parsing and
``parse_bound``) and runs with the master spark-submit was given: ``spark.master`` of the
config is replaced by it, so the session factory never moves a submitted job back to
``local``. ``kappa stream submit`` builds this command (jobs/spark/submit.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

USAGE_EXIT = 2


def submitted_master() -> str | None:
    """The master spark-submit launched this process with (None when not under spark-submit)."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connect to spark-submit's JVM: SparkConf reads its settings
    return SparkConf().get("spark.master", None)


def main(argv: list[str] | None = None) -> int:
    """Run ``kappa stream run`` with ``argv``; return the exit code (2 for bad arguments)."""
    import typer
    from typer._click import exceptions as click_errors

    from jobs.errors import KappaError
    from jobs.streaming.cli import run

    master = submitted_master()
    if master:
        os.environ["KAPPA_SPARK__MASTER"] = master
    command = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    command.command()(run)
    args = sys.argv[1:] if argv is None else argv
    try:
        typer.main.get_command(command).main(args=list(args), prog_name="main.py",
                                             standalone_mode=False)
    except click_errors.UsageError as exc:
        print(f"error: {exc.format_message()}", file=sys.stderr)
        return USAGE_EXIT
    except typer.Exit as exc:
        return exc.exit_code
    except KappaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


def _fix_sys_path() -> None:
    """spark-submit runs this file as a script, with the ``--py-files`` zip first on sys.path.

    Its folder must not shadow top-level modules. Run from a checkout (client mode), the driver
    imports the checkout (the zip was just built from it), so paths in conf resolve against the
    repository, not against the zip; elsewhere (cluster mode) it imports the zip and reads conf
    from ``KAPPA_CONF_DIR``.
    """
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != here]
    root = here.parents[1]
    if (root / "jobs" / "__init__.py").is_file() and (root / "conf" / "base.yaml").is_file():
        sys.path.insert(0, str(root))


if __name__ == "__main__":
    _fix_sys_path()
    sys.exit(main())
