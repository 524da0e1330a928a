"""Fixtures of the loader tests: a fresh lake and fresh topics per test."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from jobs.config.load import KappaConfig, load_config
from tests.integration.loader.support import Lake


@pytest.fixture()
def lake(stack: KappaConfig, kappa_env: dict[str, str], topic_factory, tmp_path: Path) -> Callable[..., Lake]:
    def make(tables: dict[str, dict] | None = None, partitions: int = 3, **loader: object) -> Lake:
        wanted = tables or {"bronze.rsvps_raw": {}, "ops.dlq": {}}
        topics = {name: topic_factory(partitions if name != "ops.dlq" else 1) for name in wanted}
        conf = {name: {"topic": topics[name], **extra} for name, extra in wanted.items()}
        env = {**kappa_env, "KAPPA_LAKE__ROOT": str(tmp_path / "lake"),
               "KAPPA_LOADER__TABLES": json.dumps(conf)}
        env |= {f"KAPPA_LOADER__{key.upper()}": json.dumps(value) for key, value in loader.items()}
        return Lake(load_config("test", environ=env), env, topics)

    return make


