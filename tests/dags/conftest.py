"""DAG tests parse the project's dags/ with an Airflow home of their own (never ~/airflow)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from jobs.orchestration.dagkit import PLUGINS_FOLDER

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
# Airflow reads its config when first imported: point it at a private home before that.
os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="kappa-dagtests-")  # dag.test() writes its DB there
atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS)
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(PLUGINS_FOLDER)  # the replay DAG's timetable
HEAVY = ("pyspark", "pyarrow", "confluent_kafka", "redis", "deltalake", "great_expectations")


@contextmanager
def patched_environ(env: dict[str, str]) -> Iterator[None]:
    """``env`` in os.environ (the task layer and the processes it starts read it), restored after."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def dagbag_and_imports():
    """The DagBag of dags/ and the heavy modules its parsing imported."""
    import sys

    from airflow.dag_processing.dagbag import DagBag

    before = set(sys.modules)
    bag = DagBag(dag_folder=str(DAGS))
    added = {name.split(".")[0] for name in set(sys.modules) - before}
    return bag, sorted(added & set(HEAVY))


@pytest.fixture(scope="session")
def dagbag(dagbag_and_imports):
    return dagbag_and_imports[0]
