"""Operator errors are one readable line and a non-zero exit, never only a stack trace."""

from __future__ import annotations

import pytest


def test_broken_conf_file_exits_2_with_one_line(tmp_path, run_kappa):
    (tmp_path / "base.yaml").write_text("env: x\nkafka:\n  bootstrap_servers: 127.0.0.1:1\nredis: [\n")
    (tmp_path / "test.yaml").write_text("env: test\n")
    result = run_kappa("stack", "status", env={"KAPPA_CONF_DIR": str(tmp_path)})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "base.yaml line" in lines[0]


def test_invalid_value_exits_2_naming_the_key(run_kappa):
    result = run_kappa("topics", "list", env={"KAPPA_REDIS__PORT": "70000"})
    assert result.returncode == 2
    assert "redis.port" in result.stderr and "Traceback" not in result.stderr


def test_unknown_command_and_option_exit_2(run_kappa):
    assert run_kappa("stack", "explode").returncode == 2
    result = run_kappa("stack", "up", "--bogus")
    assert result.returncode == 2 and "No such option: --bogus" in result.stderr


def test_help_lists_the_commands(run_kappa):
    result = run_kappa("--help")
    assert result.returncode == 0
    for command in ("stack", "topics", "doctor", "config"):
        assert command in result.stdout


@pytest.mark.slow  # waits out the 15 s admin timeout
def test_broker_down_prints_only_the_error_line_and_logs_with_v(run_kappa):
    """Issue 18 item 11: librdkafka's reconnect lines go through logging, shown with -v only."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.conftest import free_port

    down = {"KAPPA_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}"}
    with ThreadPoolExecutor(3) as pool:  # each waits out the admin timeout: run them together
        listed, applied, verbose = pool.map(lambda args: run_kappa(*args, env=down), [
            ("topics", "list"), ("topics", "apply"), ("-v", "topics", "list")])
    for result in (listed, applied):
        assert result.returncode == 1
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr[:2000]
        assert lines[0].startswith("error: cannot reach Kafka to read topic metadata")
    assert verbose.returncode == 1
    assert "jobs.kafka.librdkafka" in verbose.stderr and "Connection refused" in verbose.stderr


def test_help_shows_no_argument_for_the_verbose_counter(run_kappa):
    """Issue 18 item 12: -v is a counter and takes no value."""
    result = run_kappa("--help")
    line = next(line for line in result.stdout.splitlines() if "--verbose" in line)
    assert "<int>" not in line and "INTEGER" not in line
    assert "-vv DEBUG" in line


def test_tables_never_cut_names_at_80_columns(kappa_env, topic_factory):
    """Issue 18 item 12: a long topic name is printed whole in an 80-column, non-terminal output."""
    import os
    import subprocess

    from tests.conftest import KAPPA, REPO

    name = topic_factory(1, prefix="tenant-with-a-rather-long-name.rsvps.raw.reprocessed-v2")
    assert len(name) > 60
    result = subprocess.run([*KAPPA, "topics", "list", "--all"], capture_output=True, text=True,
                            env={**os.environ, **kappa_env, "COLUMNS": "80"}, cwd=REPO,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert name in result.stdout
    assert "retention.ms" in result.stdout
