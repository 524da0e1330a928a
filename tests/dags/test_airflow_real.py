"""A real local Airflow from `kappa airflow up`, against the session's embedded stack.

Its metadata database is its own PostgreSQL; REST API lists every DAG with no import errors; a
headless Chromium logs into the UI and sees the DAGs (screenshot kept in var/artifacts/);
unpausing `replay` makes no run and a backfill of it while paused is refused; a REST backfill of
`replay` with Airflow's defaults over two hours loads Delta rows equal to a direct count of the
same Kafka range; with `kafka_to_delta` and `batch_gold` unpaused, late data for an earlier date
recomputes that date's gold tables; the exporter counts a failed task instance under its DAG and
reads the scheduler's heartbeat; `kappa airflow down` leaves no process behind. Every test
creates the topics it reads. Slow: Airflow starts in 20-40 s on two cores.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import delete_topics
from tests.dags import airflow_support as af

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "var" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
DAG_IDS = {"streaming_lifecycle", "kafka_to_delta", "data_quality", "delta_maintenance", "replay",
           "backfill", "checkpoint_recovery", "batch_gold"}
AIRFLOW_ENV = {"KAPPA_AIRFLOW__PORT": "0", "KAPPA_AIRFLOW__START_TIMEOUT_S": "300"}
# The module's own source topic and lake (the session's rsvps.raw and lake are shared with other
# tests): set for `kappa airflow up`, whose task processes inherit every KAPPA_* variable.
# test_reprocess_airflow_real.py's instance uses BACKFILL_ENV; this module's adds an analyzed
# topic loaded into silver.rsvps (MODULE_ENV).
BACKFILL_TOPIC = f"raw.backfill-{uuid.uuid4().hex[:8]}"
ANALYZED_TOPIC = f"analyzed.backfill-{uuid.uuid4().hex[:8]}"
BACKFILL_LAKE = tempfile.mkdtemp(prefix="kappa-backfill-lake-")
atexit.register(shutil.rmtree, BACKFILL_LAKE, ignore_errors=True)
BACKFILL_ENV = {"KAPPA_STREAMING__SOURCE_TOPIC": BACKFILL_TOPIC,
                "KAPPA_LAKE__ROOT": BACKFILL_LAKE,
                "KAPPA_LOADER__TABLES": json.dumps({"bronze.rsvps_raw": {
                    "topic": BACKFILL_TOPIC, "quality_policy": "quarantine"}})}
MODULE_ENV = {**BACKFILL_ENV, "KAPPA_STREAMING__ANALYZED_TOPIC": ANALYZED_TOPIC,
              "KAPPA_LOADER__TABLES": json.dumps({
                  "bronze.rsvps_raw": {"topic": BACKFILL_TOPIC, "quality_policy": "quarantine"},
                  "silver.rsvps": {"topic": ANALYZED_TOPIC, "quality_policy": "quarantine"}})}


def _kappa(kappa_env: dict[str, str], *args: str, timeout: float = 400,
           instance: dict[str, str] = MODULE_ENV) -> subprocess.CompletedProcess:
    env = {**os.environ, **kappa_env, **AIRFLOW_ENV, **instance, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, check=False)


def _instance_processes(home: str) -> list[int]:
    marker = f"KAPPA_AIRFLOW_INSTANCE={home}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in environ.split(b"\0") and state != "Z":
            found.append(int(entry))
    return found


@pytest.fixture(scope="module")
def instance_env() -> dict[str, str]:
    """The KAPPA_* of the module's Airflow (a module using its `airflow` fixture may override it)."""
    return MODULE_ENV


@pytest.fixture(scope="module")
def spark_service(stack, kappa_env, instance_env):
    """The instance's replays, loads and batch jobs attach to a Spark service (`kappa spark up`),
    as on an operator's machine; down with the module."""
    up = _kappa(kappa_env, "spark", "up", instance=instance_env)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield
    finally:
        down = _kappa(kappa_env, "spark", "down", timeout=120, instance=instance_env)
        assert down.returncode == 0, down.stdout + down.stderr


@pytest.fixture(scope="module")
def airflow(stack, kappa_env, instance_env, spark_service):
    started = time.monotonic()
    up = _kappa(kappa_env, "airflow", "up", instance=instance_env)
    assert up.returncode == 0, up.stdout + up.stderr
    status = json.loads(_kappa(kappa_env, "airflow", "status", "--json", instance=instance_env).stdout)
    status["startup_s"] = round(time.monotonic() - started, 1)
    print(f"airflow up in {status['startup_s']}s at {status['url']}")
    try:
        yield status
    finally:
        down = _kappa(kappa_env, "airflow", "down", timeout=120, instance=instance_env)
        assert down.returncode == 0, down.stdout + down.stderr
        assert _instance_processes(status["home"]) == []


@pytest.fixture(scope="module")
def api(airflow):
    import httpx

    token = httpx.post(f"{airflow['url']}/auth/token", timeout=30,
                       json={"username": airflow["user"], "password": airflow["password"]})
    assert token.status_code in (200, 201), token.text
    client = httpx.Client(base_url=airflow["url"], timeout=30,
                          headers={"Authorization": f"Bearer {token.json()['access_token']}"})
    yield client
    client.close()


@pytest.fixture(scope="module")
def module_cfg(stack, kappa_env):
    """What the instance's tasks see (the module's topics and lake); the topics exist, and are
    deleted when the module ends."""
    from confluent_kafka.admin import AdminClient

    from jobs.config.load import load_config

    cfg = load_config("test", environ={**kappa_env, **MODULE_ENV})
    af.ensure_topics(cfg, {BACKFILL_TOPIC: 3, ANALYZED_TOPIC: 3})
    yield cfg
    delete_topics(AdminClient(cfg.kafka.client_config()), [BACKFILL_TOPIC, ANALYZED_TOPIC])


def _wait_for_dags(api, timeout_s: float = 240) -> dict:
    deadline = time.monotonic() + timeout_s
    listed: set[str] = set()
    while time.monotonic() < deadline:
        listed = {dag["dag_id"] for dag in api.get("/api/v2/dags", params={"limit": 100}).json()["dags"]}
        if DAG_IDS <= listed:
            return api.get("/api/v2/importErrors").json()
        time.sleep(3)
    raise AssertionError(f"DAGs listed after {timeout_s}s: {sorted(listed)}")


def test_up_twice_is_harmless(airflow, kappa_env):
    again = _kappa(kappa_env, "airflow", "up")
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stderr
    assert json.loads(_kappa(kappa_env, "airflow", "status", "--json").stdout)["components"] == \
        airflow["components"]


def test_rest_api_lists_every_dag_without_import_errors(api):
    errors = _wait_for_dags(api)
    assert errors["total_entries"] == 0, errors


def test_browser_logs_in_and_sees_the_dags(airflow, api):
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).is_file():
        pytest.fail(f"{CHROMIUM} missing: run scripts/ensure-chromium.sh (apt-get install chromium)")
    _wait_for_dags(api)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(airflow["url"] + "/")
            page.fill("input[name=username]", airflow["user"])
            page.fill("input[name=password]", airflow["password"])
            page.keyboard.press("Enter")
            page.wait_for_url(lambda url: "login" not in url, timeout=30_000)
            page.goto(airflow["url"] + "/dags")
            for dag_id in sorted(DAG_IDS):
                page.get_by_text(dag_id, exact=True).first.wait_for(timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "airflow-ui-dags.png"), full_page=True)
        finally:
            browser.close()
    assert (ARTIFACTS / "airflow-ui-dags.png").stat().st_size > 10_000


def test_default_database_is_the_instances_own_postgresql(airflow):
    assert airflow["database"].startswith("postgresql+psycopg2://***@127.0.0.1:"), airflow["database"]
    assert not airflow["database"].endswith(":5432/airflow")
    rows = {row["name"]: row for row in airflow["components"]}
    assert rows["postgres"]["pid"] and rows["postgres"]["health"] == "healthy", rows


def _scrape(cfg) -> dict | None:
    """One scrape of a new exporter; None when Airflow did not answer it in time (a loaded machine)."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.registry import CollectorRegistry

    from jobs.monitoring.exporter import KappaCollector

    registry = CollectorRegistry()
    collector = KappaCollector(cfg)
    registry.register(collector)
    try:
        got = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(generate_latest(registry).decode())
               for s in family.samples}
    finally:
        collector.close()
    return got if got.get(("kappa_exporter_source_up", (("source", "airflow"),))) == 1 else None


def test_the_exporter_counts_failed_task_instances_and_the_scheduler_heartbeat(airflow, api, module_cfg):
    """A `backfill` run whose starting offsets lie after its ending ones fails its only task at
    once, without retries (jobs/orchestration/tasks.py): one failed task instance, which the
    exporter counts under its DAG, beside the scheduler's health and heartbeat."""
    af.wait_for("the backfill DAG parsed", lambda: api.get("/api/v2/dags/backfill").status_code == 200, 300)
    assert api.patch("/api/v2/dags/backfill", json={"is_paused": False}).status_code == 200
    try:
        created = api.post("/api/v2/dags/backfill/dagRuns", json={
            "logical_date": None, "conf": {"starting_offsets": '{"0": 5, "1": 0, "2": 0}',
                                           "ending_offsets": '{"0": 1, "1": 0, "2": 0}'}})
        assert created.status_code in (200, 201), created.text
        run = af.finished(api, "backfill", created.json()["dag_run_id"], timeout_s=600)
    finally:
        api.patch("/api/v2/dags/backfill", json={"is_paused": True})
    assert run["state"] == "failed", run
    cfg = module_cfg.model_copy(update={"monitoring": module_cfg.monitoring.model_copy(
        update={"airflow_url": airflow["url"]}), "airflow": module_cfg.airflow.model_copy(
        update={"home": Path(airflow["home"])})})
    got = af.wait_for("the exporter read Airflow", lambda: _scrape(cfg), timeout_s=120, poll_s=5)
    scraped_at = time.time()
    assert got[("kappa_airflow_failed_task_instances", (("dag_id", "backfill"),))] == 1
    assert got[("kappa_airflow_scheduler_up", ())] == 1
    beat = got[("kappa_airflow_scheduler_heartbeat_timestamp_seconds", ())]
    assert scraped_at - 120 < beat <= scraped_at + 5, (beat, scraped_at)


def test_rest_backfill_of_replay_with_airflows_defaults_loads_exactly_the_kafka_range(api, module_cfg,
                                                                                      kappa_env):
    """A backfill of the paused DAG is refused with the reason; unpausing makes no run (a run of
    the scheduler's own would hold its hour); a REST backfill with Airflow's defaults (reprocess
    behaviour "none", 10 active runs; no retry: PostgreSQL never answers 503 "Database is
    locked") replays every hour, one task at a time, and loads exactly the Kafka range."""
    cfg = module_cfg
    _wait_for_dags(api)
    now_hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = now_hour - timedelta(hours=2)  # the last hour is the one the scheduler would take
    before = af.bronze_rows(cfg)
    af.produce_in_hours(cfg, start, per_hour=150)
    last_logical = start + timedelta(hours=1)  # a data interval's logical date is its start
    assert api.patch("/api/v2/dags/replay", json={"is_paused": True}).status_code == 200  # as created
    backfills = api.get("/api/v2/backfills", params={"dag_id": "replay"}).json()["total_entries"]
    refused = _kappa(kappa_env, "airflow", "backfill", "replay", "--from", start.isoformat(),
                     "--to", last_logical.isoformat())
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "error: DAG replay is paused" in refused.stderr and "--unpause" in refused.stderr, refused.stderr
    assert api.get("/api/v2/backfills", params={"dag_id": "replay"}).json()["total_entries"] == backfills

    assert api.patch("/api/v2/dags/replay", json={"is_paused": False}).status_code == 200
    dag = api.get("/api/v2/dags/replay").json()
    assert dag["next_dagrun_run_after"] is None and dag["next_dagrun_logical_date"] is None, dag
    assert af.runs(api, "replay", run_type="scheduled") == []

    body = {"dag_id": "replay", "from_date": start.isoformat(), "to_date": last_logical.isoformat()}
    planned = api.post("/api/v2/backfills/dry_run", json=body).json()
    assert [run["logical_date"] for run in planned["backfills"]] == [
        start.isoformat().replace("+00:00", "Z"), last_logical.isoformat().replace("+00:00", "Z")], planned
    created = api.post("/api/v2/backfills", json=body)
    assert created.status_code in (200, 201), created.text
    backfill_id = created.json()["id"]
    started = time.monotonic()
    af.wait_for("the backfill completed",
                lambda: api.get(f"/api/v2/backfills/{backfill_id}").json()["completed_at"], 900, 5)
    runs = [run for run in af.runs(api, "replay", run_type="backfill")  # this backfill's (by hour)
            if start <= datetime.fromisoformat(run["logical_date"]) <= last_logical]
    states = {run["dag_run_id"]: run["state"] for run in runs}
    assert states and set(states.values()) == {"success"}, states
    intervals = sorted((run["data_interval_start"], run["data_interval_end"]) for run in runs)
    covered_start = datetime.fromisoformat(intervals[0][0])
    covered_end = datetime.fromisoformat(intervals[-1][1])
    assert (covered_start, covered_end) == (start, now_hour), intervals
    tis = sorted((ti["start_date"], ti["end_date"], ti["try_number"]) for run in runs
                 for ti in af.task_instances(api, "replay", run["dag_run_id"]))
    assert [try_number for *_, try_number in tis] == [1, 1], tis  # no pre-flight conflict, no retry
    assert tis[0][1] <= tis[1][0], tis                             # one hour at a time
    print(f"backfill {backfill_id}: {len(states)} runs done in {time.monotonic() - started:.0f}s")
    assert af.bronze_rows(cfg) - before == af.kafka_count(cfg, covered_start, covered_end) == 300


def test_cli_backfill_passes_its_conf_and_waits_for_the_runs(api, module_cfg, kappa_env):
    """``kappa airflow backfill --conf ... --wait --json``: the runs get the conf, the command
    returns once Airflow completed the backfill, with each run's state; a --conf that is not a
    JSON object is one line and exit 2."""
    bad = _kappa(kappa_env, "airflow", "backfill", "replay", "--from", "2026-01-01T00:00:00Z",
                 "--to", "2026-01-01T00:00:00Z", "--conf", "[1]")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --conf '[1]'"), bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    _wait_for_dags(api)
    # hours before the other backfill's: nothing to replay
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=6)
    conf = {"sinks": ["delta"], "dry_run": True}
    done = _kappa(kappa_env, "airflow", "backfill", "replay", "--from", hour.isoformat(), "--to",
                  hour.isoformat(), "--conf", json.dumps(conf), "--unpause", "--wait", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert [run["state"] for run in report["runs"]] == ["success"], report
    assert api.get(f"/api/v2/backfills/{report['backfill_id']}").json()["completed_at"]
    run = api.get(f"/api/v2/dags/replay/dagRuns/{report['runs'][0]['run_id']}").json()
    assert run["conf"] == conf and run["state"] == "success", run



CITY = ("city", "rsvps", "yes", "guests")


def _load(api, after: set[str]) -> list[dict]:
    """A run of kafka_to_delta, and any the scheduler made meanwhile (unpausing it at most 5 min
    after a quarter hour makes one): every new run, ended."""
    af.trigger(api, "kafka_to_delta")
    return af.settled(api, "kafka_to_delta", after)


def _published(api, runs: list[dict]) -> list[tuple[str, list[str]]]:
    """(table, dates) of each Asset event the runs' publish tasks reported."""
    assert [run["state"] for run in runs] == ["success"] * len(runs), runs
    return [(row["table"], row["dates"]) for run in runs
            for row in af.xcom(api, "kafka_to_delta", run["dag_run_id"], "publish_assets")]


def test_late_data_loaded_by_kafka_to_delta_recomputes_its_date_in_batch_gold(api, module_cfg):
    """kafka_to_delta and batch_gold unpaused, as in production: a load publishes the dates it
    changed, batch_gold's Asset-triggered runs recompute exactly those dates; a late RSVP of an
    earlier date changes that date's gold rows and no other; a load of nothing publishes nothing."""
    cfg = module_cfg
    _wait_for_dags(api)
    today = datetime.now(UTC).date()
    first, second = (today - timedelta(days=3)).isoformat(), (today - timedelta(days=2)).isoformat()
    before = seen = af.run_ids(api, "kafka_to_delta", "batch_gold")

    def rsvp(rsvp_id: int, day: str, city: str, **fields) -> dict:
        return af.analyzed_record(rsvp_id, date.fromisoformat(day), city, source_topic=BACKFILL_TOPIC,
                                  **fields)

    af.produce_records(cfg, ANALYZED_TOPIC, [rsvp(901, first, "Barcelona"),
                                             rsvp(902, first, "Barcelona", guests=2),
                                             rsvp(903, second, "Madrid", response="no")])
    started = time.monotonic()
    try:
        for dag_id in ("kafka_to_delta", "batch_gold"):
            assert api.patch(f"/api/v2/dags/{dag_id}", json={"is_paused": False}).status_code == 200
        loads = _load(api, seen["kafka_to_delta"])
        triggered = af.settled(api, "batch_gold", seen["batch_gold"], "asset_triggered")
        states = {(run["run_type"], ti["task_id"]): (ti["state"], ti["try_number"]) for run in triggered
                  for ti in af.task_instances(api, "batch_gold", run["dag_run_id"])}
        assert set(states.values()) == {("success", 1)}, states
        assert ("silver.rsvps", [first, second]) in _published(api, loads)
        gold = af.gold_rows(cfg.lake.root, "gold.city_daily", CITY)
        assert (gold.get(first), gold.get(second)) == ([("Barcelona", 2, 2, 2)], [("Madrid", 1, 0, 0)]), gold

        # a late RSVP of the first date arrives (a scheduled load still going counts as new)
        seen = af.run_ids(api, "batch_gold") | af.ended_ids(api, "kafka_to_delta")
        af.produce_records(cfg, ANALYZED_TOPIC, [rsvp(904, first, "Madrid", guests=1)])
        assert _published(api, _load(api, seen["kafka_to_delta"])) == [("silver.rsvps", [first])]
        recomputed = af.settled(api, "batch_gold", seen["batch_gold"], "asset_triggered")
        assert [run["run_type"] for run in recomputed] == ["asset_triggered"], recomputed
        report = af.xcom(api, "batch_gold", recomputed[0]["dag_run_id"], "city_daily")
        assert report["dates"] == [first], report
        regold = af.gold_rows(cfg.lake.root, "gold.city_daily", CITY)
        assert regold[first] == [("Barcelona", 2, 2, 2), ("Madrid", 1, 1, 1)], regold
        assert regold[second] == gold[second]
        events = af.gold_rows(cfg.lake.root, "gold.event_stats", ("event_id", "rsvps", "expected_attendance"))
        assert events[first] == [("e901", 1, 1), ("e902", 1, 3), ("e904", 1, 2)], events

        # nothing new: nothing published
        seen = af.run_ids(api, "batch_gold") | af.ended_ids(api, "kafka_to_delta")
        idle = _load(api, seen["kafka_to_delta"])
        assert _published(api, idle) == []
        for run in idle:
            events_of_idle = api.get("/api/v2/assets/events", params={
                "source_dag_id": "kafka_to_delta", "source_run_id": run["dag_run_id"]}).json()
            assert events_of_idle["total_entries"] == 0, events_of_idle
        new_runs = [(dag_id, run) for dag_id, ids in af.run_ids(api, *before).items() for run in ids
                    if run not in before[dag_id]]
        tis = [(ti["dag_id"], ti["task_id"], ti["state"], ti["try_number"]) for dag_id, run in new_runs
               for ti in af.task_instances(api, dag_id, run)]
        assert tis and all(state == "success" and tries == 1 for *_, state, tries in tis), tis
        print(f"late data recomputed in {time.monotonic() - started:.0f}s; runs: {sorted(new_runs)}")
    finally:
        for dag_id in ("kafka_to_delta", "batch_gold"):
            api.patch(f"/api/v2/dags/{dag_id}", json={"is_paused": True})
