"""The shipped alert rules: promtool checks and tests them; every alert is complete and leads to a runbook."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "infra" / "monitoring"
RULES = MONITORING / "rules" / "kappa.rules.yml"
RULE_TESTS = MONITORING / "tests" / "kappa.rules.test.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed: run `make setup` (scripts/ensure-prometheus.sh)")
ALERTS_SECTION = "## Alerts that lead here"


def alerts() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=MONITORING, capture_output=True, text=True,
                          check=False, timeout=120)


@needs_promtool
def test_promtool_checks_the_rules_and_the_config():
    rules = promtool("check", "rules", str(RULES))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    config = promtool("check", "config", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr


@needs_promtool
def test_promtool_rule_tests_pass():
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_rule_tests_fail_on_a_weakened_rule(tmp_path):
    (tmp_path / "rules").mkdir()
    (tmp_path / "tests").mkdir()
    text = RULES.read_text().replace("/ rate(kappa_stream_input_records_total[5m]) > 0.05",
                                     "/ rate(kappa_stream_input_records_total[5m]) > 0.5")
    assert text != RULES.read_text()
    (tmp_path / "rules" / "kappa.rules.yml").write_text(text)
    shutil.copy(RULE_TESTS, tmp_path / "tests" / RULE_TESTS.name)
    result = subprocess.run([PROMTOOL, "test", "rules", str(tmp_path / "tests" / RULE_TESTS.name)],
                            capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode != 0
    assert "KappaDeadLetterRateHigh" in result.stdout + result.stderr


def test_every_alert_has_for_severity_and_annotations():
    found = alerts()
    assert len(found) >= 11
    for rule in found:
        name = rule["alert"]
        assert re.fullmatch(r"\d+[smh]", str(rule.get("for", ""))), f"{name}: no `for:`"
        assert rule.get("labels", {}).get("severity") in ("page", "warning"), f"{name}: severity"
        annotations = rule.get("annotations", {})
        for key in ("summary", "description", "runbook_url"):
            assert annotations.get(key, "").strip(), f"{name}: no {key}"


def test_every_runbook_url_exists_and_names_its_alerts():
    for rule in alerts():
        name, url = rule["alert"], rule["annotations"]["runbook_url"]
        page = (RULES.parent / url).resolve()
        assert page.is_relative_to(REPO / "docs" / "runbooks") and page.exists(), f"{name}: {url} not found"
        text = page.read_text()
        assert ALERTS_SECTION in text, f"{page.name}: no '{ALERTS_SECTION}' section"
        section = text.split(ALERTS_SECTION, 1)[1].split("\n## ", 1)[0]
        assert f"`{name}`" in section, f"{page.name}: its '{ALERTS_SECTION}' does not name {name}"


def test_every_alert_has_a_firing_and_a_quiet_case():
    cases: dict[str, set[bool]] = {}
    for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for case in test.get("alert_rule_test", []):
            cases.setdefault(case["alertname"], set()).add(bool(case["exp_alerts"]))
    for rule in alerts():
        assert cases.get(rule["alert"]) == {True, False}, f"{rule['alert']}: needs a firing and a quiet case"
