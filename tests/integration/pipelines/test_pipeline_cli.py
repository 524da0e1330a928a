"""The platform's commands address a pipeline with --pipeline; mistakes are one line and exit 2."""

from __future__ import annotations

import json

import pytest

from tests.integration.pipelines.tiny import write_tiny

pytestmark = pytest.mark.integration


def test_stream_and_reprocess_commands_dispatch_to_an_engine_pipeline(stack, run_kappa, tmp_path) -> None:
    _, name, _ = write_tiny(tmp_path)
    env = {"KAPPA_PIPELINES_PATH": str(tmp_path)}
    for command in (["stream", "status"], ["reprocess", "status"]):
        done = run_kappa(*command, "--pipeline", name, "--json", env=env)
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)
        assert [(row["version"], row["query"], row["pid"]) for row in rows] == [(1, f"{name}-live", None)]
    stopped = run_kappa("stream", "stop", "--pipeline", name, env=env)
    assert (stopped.returncode, stopped.stdout.strip()) == (0, f"no run of pipeline {name} version 1 is "
                                                              f"registered (pipeline-{name})")


@pytest.mark.parametrize(("args", "message"), [
    (["stream", "status", "--pipeline", "nosuch"], "error: no pipeline 'nosuch'; the pipelines are: "),
    (["pipelines", "run", "{name}", "--sinks", "kafka,hdfs"], "error: --sinks 'kafka,hdfs': choose from"),
    (["pipelines", "view", "{name}", "nosuch"], "error: pipeline {name} has no view 'nosuch'; its views: "),
    (["pipelines", "reprocess", "{name}", "--version", "1"], "error: --version 1: version 1 is the "),
    (["pipelines", "promote", "{name}", "--version", "7"], "error: pipeline {name} has no version 7; "),
    (["pipelines", "produce", "{name}", "/nonexistent"], "error: cannot read /nonexistent:"),
])
def test_mistakes_are_one_line(stack, run_kappa, tmp_path, args, message) -> None:
    _, name, _ = write_tiny(tmp_path)
    done = run_kappa(*(arg.format(name=name) for arg in args), env={"KAPPA_PIPELINES_PATH": str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr.startswith(message.format(name=name)), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_several_pipelines_and_no_default_need_a_name(stack, run_kappa, tmp_path) -> None:
    write_tiny(tmp_path)
    done = run_kappa("stream", "status", env={"KAPPA_PIPELINES_PATH": str(tmp_path),
                                              "KAPPA_PIPELINES__DEFAULT": "null"})
    assert done.returncode == 2 and "say which with --pipeline NAME" in done.stderr, done.stderr
