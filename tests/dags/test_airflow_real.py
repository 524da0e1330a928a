"""A real local Airflow from `kappa airflow up`, against the session's embedded stack.

Its metadata database is its own PostgreSQL; REST API lists every DAG with no import errors; a
headless Chromium logs into the UI and sees the DAGs (screenshot kept in var/artifacts/);
unpausing `replay` writes nothing and a backfill of it while paused is refused; a REST backfill
of `replay` over two hours loads Delta rows equal to a direct count of the same Kafka range;
`kappa airflow down` leaves no process behind. Slow: Airflow starts in 20-40 s on two cores.
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
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "var" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
DAG_IDS = {"streaming_lifecycle", "kafka_to_delta", "data_quality", "delta_maintenance", "replay",
           "backfill", "checkpoint_recovery"}
AIRFLOW_ENV = {"KAPPA_AIRFLOW__PORT": "0", "KAPPA_AIRFLOW__START_TIMEOUT_S": "300"}
# The backfill test's own source topic and lake (the session's rsvps.raw and lake are shared with
# other tests): set for `kappa airflow up`, whose task processes inherit every KAPPA_* variable.
BACKFILL_TOPIC = f"raw.backfill-{uuid.uuid4().hex[:8]}"
BACKFILL_LAKE = tempfile.mkdtemp(prefix="kappa-backfill-lake-")
atexit.register(shutil.rmtree, BACKFILL_LAKE, ignore_errors=True)
BACKFILL_ENV = {"KAPPA_STREAMING__SOURCE_TOPIC": BACKFILL_TOPIC,
                "KAPPA_LAKE__ROOT": BACKFILL_LAKE,
                "KAPPA_LOADER__TABLES": json.dumps({"bronze.rsvps_raw": {
                    "topic": BACKFILL_TOPIC, "quality_policy": "quarantine"}})}


def _kappa(kappa_env: dict[str, str], *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    env = {**os.environ, **kappa_env, **AIRFLOW_ENV, **BACKFILL_ENV, "COLUMNS": "200"}
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
def airflow(stack, kappa_env):
    started = time.monotonic()
    up = _kappa(kappa_env, "airflow", "up")
    assert up.returncode == 0, up.stdout + up.stderr
    status = json.loads(_kappa(kappa_env, "airflow", "status", "--json").stdout)
    status["startup_s"] = round(time.monotonic() - started, 1)
    print(f"airflow up in {status['startup_s']}s at {status['url']}")
    try:
        yield status
    finally:
        down = _kappa(kappa_env, "airflow", "down", timeout=120)
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


def _produce_in_hours(cfg, start: datetime, per_hour: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from jobs.collector.generator import RsvpGenerator

    admin = AdminClient(cfg.kafka.client_config())
    topic = cfg.streaming.source_topic
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(timeout=30)
    producer = Producer(cfg.kafka.client_config())
    lines = RsvpGenerator(seed=16, start_ms=int(start.timestamp() * 1000)).generate(2 * per_hour)
    step_ms = 3_600_000 // per_hour
    for index, item in enumerate(lines):
        stamp = int(start.timestamp() * 1000) + index * step_ms
        producer.produce(cfg.streaming.source_topic, item.line, key=str(item.rsvp_id).encode(),
                         timestamp=stamp)
    assert producer.flush(30) == 0


def _kafka_count(cfg, start: datetime, end: datetime) -> int:
    """Records of the source topic whose timestamp is in [start, end): read straight from Kafka."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**cfg.kafka.client_config(), "group.id": "dag-test-count",
                         "enable.auto.commit": False})
    topic = cfg.streaming.source_topic
    count, lo, hi = 0, start.timestamp() * 1000, end.timestamp() * 1000
    try:
        for partition in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            consumer.assign([TopicPartition(topic, partition, low)])
            position = low
            while position < high:
                message = consumer.poll(10)
                assert message is not None and not message.error()
                position = message.offset() + 1
                count += lo <= message.timestamp()[1] < hi
    finally:
        consumer.close()
    return count


def _wait_for_scheduled_runs(api, appear_s: float = 90, finish_s: float = 600) -> dict[str, str]:
    """Until the scheduled runs of ``replay`` (if one appears within ``appear_s``) have ended.

    Returns each scheduled run's task states ({run id: state of replay_interval}).
    """
    began = time.monotonic()
    while time.monotonic() - began < finish_s:
        runs = api.get("/api/v2/dags/replay/dagRuns", params={"run_type": "scheduled"}).json()["dag_runs"]
        if runs and all(run["state"] in ("success", "failed") for run in runs):
            print("scheduled runs ended:", {run["dag_run_id"]: run["state"] for run in runs})
            return {run["dag_run_id"]: api.get(f"/api/v2/dags/replay/dagRuns/{run['dag_run_id']}/"
                                               "taskInstances").json()["task_instances"][0]["state"]
                    for run in runs}
        if not runs and time.monotonic() - began > appear_s:
            return {}
        time.sleep(5)
    raise AssertionError(f"the scheduled run of replay did not end within {finish_s}s")


def test_default_database_is_the_instances_own_postgresql(airflow):
    assert airflow["database"].startswith("postgresql+psycopg2://***@127.0.0.1:"), airflow["database"]
    assert not airflow["database"].endswith(":5432/airflow")
    rows = {row["name"]: row for row in airflow["components"]}
    assert rows["postgres"]["pid"] and rows["postgres"]["health"] == "healthy", rows


def test_rest_backfill_of_replay_loads_exactly_the_kafka_range(api, stack, kappa_env):
    """Unpausing replay writes nothing; a backfill of the paused DAG is refused with the reason;
    a REST backfill (no retry: PostgreSQL never answers 503 "Database is locked") loads exactly
    the Kafka range."""
    from deltalake import DeltaTable

    from jobs.common.config import load_config
    from jobs.common.delta import table_uri

    cfg = load_config("test", environ={**kappa_env, **BACKFILL_ENV})  # what the tasks see
    _wait_for_dags(api)
    now_hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    # The backfill stays clear of the logical date of the scheduled run that unpausing makes,
    # [now_hour - 1h, now_hour) (Airflow 3.3's scheduler crashes on the UNIQUE(dag_id,
    # logical_date) clash when a backfill run got there first).
    start = now_hour - timedelta(hours=3)
    _produce_in_hours(cfg, start, per_hour=150)
    last_logical = start + timedelta(hours=1)  # a data interval's logical date is its start
    refused = _kappa(kappa_env, "airflow", "backfill", "replay", "--from", start.isoformat(),
                     "--to", last_logical.isoformat())
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "error: DAG replay is paused" in refused.stderr and "--unpause" in refused.stderr, refused.stderr
    assert api.get("/api/v2/backfills", params={"dag_id": "replay"}).json()["total_entries"] == 0

    assert api.patch("/api/v2/dags/replay", json={"is_paused": False}).status_code == 200
    scheduled = _wait_for_scheduled_runs(api)
    assert set(scheduled.values()) <= {"skipped"}, scheduled  # unpausing wrote nothing
    assert not Path(table_uri(cfg.lake.root, "bronze.rsvps_raw")).exists()

    body = {"dag_id": "replay", "from_date": start.isoformat(), "to_date": last_logical.isoformat(),
            "max_active_runs": 1, "reprocess_behavior": "completed", "run_backwards": False}
    planned = api.post("/api/v2/backfills/dry_run", json=body).json()
    print("backfill dry run:", planned)
    created = api.post("/api/v2/backfills", json=body)
    assert created.status_code in (200, 201), created.text
    backfill_id = created.json()["id"]
    started = time.monotonic()
    deadline = started + 900
    while time.monotonic() < deadline:
        if api.get(f"/api/v2/backfills/{backfill_id}").json()["completed_at"]:
            break
        time.sleep(5)
    runs = api.get("/api/v2/dags/replay/dagRuns", params={"run_type": "backfill", "limit": 100}).json()
    states = {run["dag_run_id"]: run["state"] for run in runs["dag_runs"]}
    assert states and set(states.values()) == {"success"}, states
    intervals = sorted((run["data_interval_start"], run["data_interval_end"]) for run in runs["dag_runs"])
    covered_start = datetime.fromisoformat(intervals[0][0])
    covered_end = datetime.fromisoformat(intervals[-1][1])
    assert covered_end - covered_start == timedelta(hours=2), intervals
    print(f"backfill {backfill_id}: {len(states)} runs done in {time.monotonic() - started:.0f}s")
    rows = DeltaTable(table_uri(cfg.lake.root, "bronze.rsvps_raw")).to_pyarrow_table().num_rows
    assert rows == _kafka_count(cfg, covered_start, covered_end) == 300


def test_cli_backfill_passes_its_conf_and_waits_for_the_runs(api, kappa_env):
    """``kappa airflow backfill --conf ... --wait --json``: the runs get the conf, the command
    returns once Airflow completed the backfill, with each run's state; a --conf that is not a
    JSON object is one line and exit 2."""
    bad = _kappa(kappa_env, "airflow", "backfill", "replay", "--from", "2026-01-01T00:00:00Z",
                 "--to", "2026-01-01T00:00:00Z", "--conf", "[1]")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --conf '[1]'"), bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    _wait_for_dags(api)
    # an hour before the other backfill's and clear of the scheduled runs: nothing to replay
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
