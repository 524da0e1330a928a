"""`kappa monitor up | status | down` runs Prometheus and Alertmanager with the shipped rules."""

from __future__ import annotations

import json
import shutil
import urllib.request

import pytest

from jobs.host.processes import alive

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("prometheus-alertmanager")
                                is None, reason="prometheus is not installed (make setup)")


def test_up_status_down(run_kappa, tmp_path):
    env = {"KAPPA_STACK__DATA_DIR": str(tmp_path / "stack")}
    up = run_kappa("monitor", "up", "--json", env=env)
    assert up.returncode == 0, up.stderr
    report = json.loads(up.stdout)
    try:
        assert report["prometheus"]["running"] and report["alertmanager"]["running"]
        url = report["prometheus"]["url"]
        with urllib.request.urlopen(f"{url}/api/v1/rules", timeout=5) as response:
            groups = json.loads(response.read())["data"]["groups"]
        names = {rule["name"] for group in groups for rule in group["rules"]}
        assert {"KappaStreamingJobDown", "KappaServeSaturated"} <= names
        again = json.loads(run_kappa("monitor", "up", "--json", env=env).stdout)
        assert again["prometheus"]["pid"] == report["prometheus"]["pid"]  # one instance only
    finally:
        down = run_kappa("monitor", "down", "--json", env=env)
    assert down.returncode == 0, down.stderr
    assert sorted(json.loads(down.stdout)["stopped"]) == ["alertmanager", "prometheus"]
    assert not alive(report["prometheus"]["pid"]) and not alive(report["alertmanager"]["pid"])
    status = json.loads(run_kappa("monitor", "status", "--json", env=env).stdout)
    assert not status["prometheus"]["running"]
