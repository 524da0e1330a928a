"""The Spark service's code version covers the engine and every pipeline folder it would run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs.config.load import PROJECT_ROOT
from jobs.spark.service_state import code_roots, code_version

pytestmark = pytest.mark.unit


def _tree(root: Path) -> tuple[Path, Path]:
    engine, pipeline = root / "jobs", root / "pipelines" / "p"
    pipeline.mkdir(parents=True)
    engine.mkdir()
    (engine / "job.py").write_text("X = 1\n")
    (pipeline / "pipeline.py").write_text("Y = 1\n")
    (pipeline / "pipeline.yaml").write_text("name: p\n")
    return engine, root / "pipelines"


def test_a_change_in_a_pipelines_code_or_definition_changes_the_version(tmp_path: Path) -> None:
    engine, pipelines = _tree(tmp_path)
    roots = [engine, pipelines]
    first = code_version(roots)
    assert code_version(roots) == first
    (pipelines / "p" / "pipeline.yaml").write_text("name: p\ndescription: changed\n")
    second = code_version(roots)
    assert second != first
    (pipelines / "p" / "pipeline.py").write_text("Y = 22\n")
    assert code_version(roots) not in (first, second)
    assert code_version([engine]) != code_version(roots)   # the pipelines count at all


def test_the_roots_are_the_engine_and_the_registrys_search_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("KAPPA_PIPELINES_PATH", os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))
    assert code_roots() == [PROJECT_ROOT / "jobs", PROJECT_ROOT / "pipelines", tmp_path / "a", tmp_path / "b"]
