"""Operator errors are one readable line and a non-zero exit, never only a stack trace."""

from __future__ import annotations


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
