"""``build_submit`` takes a checkpoint root the job's state layer can write (local or S3), no other."""

from __future__ import annotations

import pytest

from jobs.config.load import load_config
from jobs.errors import ConfigError
from jobs.spark.submit import build_submit


def _cfg(root: str):
    return load_config("test", environ={}, overrides={"lake.checkpoint_root": root})


@pytest.mark.parametrize("root", ["s3a://kappa-checkpoints/prod", "s3://kappa-checkpoints/prod", "/mnt/ckpt"])
def test_a_local_or_s3_checkpoint_root_is_submitted(root: str) -> None:
    command = build_submit(_cfg(root), ["--mode", "live"], master="local[2]")
    assert command[-2:] == ["--mode", "live"]


def test_another_scheme_is_refused_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"job state lives on a local path or on S3 .*not hdfs://"):
        build_submit(_cfg("hdfs://namenode/checkpoints"), ["--mode", "live"], master="local[2]")
