"""Pipeline definitions: the shipped RSVP pipeline validates; each kind of mistake is one line."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from jobs.config.paths import PATH_ENV
from jobs.pipelines.registry import discover, load
from jobs.pipelines.validate import problems
from tests.conftest import KAPPA, REPO

SPEC = """\
name: {name}
code: pipeline.py
source: {{topic: {name}.raw, key: id}}
outputs:
  analyzed: {{topic: {name}.out}}
  dlq: {{topic: {name}.dlq, partitions: 1}}
streaming: {{query_name: {name}-live, redis_prefix: {name}}}
views:
  per_colour: {{kind: {kind}, key: colour{extra}}}
tables:
  silver.{name}: {{topic: {name}.out, dedup_key: [id]}}
"""
CODE = """\
import pyarrow as pa
from jobs.pipelines import definitions

pipeline = definitions(__file__)
pipeline.analyzed_schema = pa.schema([("id", pa.int64()), ("colour", pa.string()),
                                      ("event_time_ms", pa.int64())])

@pipeline.parse
def parse(value, key, params):
    return {{}}

@pipeline.analyze
def analyze(record, previous, params):
    return record, None
{more}"""


def write(root: Path, name: str, *, folder: str | None = None, kind: str = "counter", extra: str = "",
          code: str = "") -> Path:
    folder_path = root / (folder or name)
    folder_path.mkdir(parents=True)
    (folder_path / "pipeline.yaml").write_text(SPEC.format(name=name, kind=kind, extra=extra))
    (folder_path / "pipeline.py").write_text(CODE.format(more=code))
    return folder_path


def lines_of(*folders: Path) -> list[str]:
    return problems([load(folder) for folder in folders])


def test_the_shipped_rsvp_pipeline_is_valid() -> None:
    [rsvp] = [folder for folder in discover({}) if folder.name == "rsvp"]
    assert lines_of(rsvp) == []
    spec = load(rsvp).spec
    assert spec is not None and spec.source.topic == "rsvps.raw"
    assert {name: view.kind for name, view in spec.views.items()} == {
        "cities": "tumbling", "topics": "sliding", "topics_all": "counter", "members": "distinct",
        "event": "entity"}


def test_a_tiny_pipeline_is_valid(tmp_path: Path) -> None:
    assert lines_of(write(tmp_path, "tiny")) == []


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"kind": "histogram"}, "views.per_colour: Input tag 'histogram' found using 'kind' does not match"),
    ({"kind": "sliding", "extra": ", window_s: 600, slide_s: 70"},
     "window_s 600 is not a multiple of slide_s 70"),
    ({"kind": "counter", "extra": ", colour_bucket: 3"},
     "views.per_colour.counter.colour_bucket: Extra inputs"),
    ({"folder": "other"}, "name 'tiny' differs from its folder 'other'"),
    ({"code": "raise RuntimeError('no database here')\n"},
     "code: importing pipeline.py failed: RuntimeError: no database here"),
])
def test_each_mistake_is_one_line_naming_the_pipeline_and_the_place(tmp_path: Path, kwargs, expected) -> None:
    [line] = lines_of(write(tmp_path, "tiny", **kwargs))
    assert line.startswith("pipeline tiny: ") and expected in line, line
    assert "\n" not in line and "Traceback" not in line


def test_a_kappa_stream_pipeline_registers_a_record_codec(tmp_path: Path) -> None:
    folder = write(tmp_path, "tiny")
    spec = (folder / "pipeline.yaml").read_text().replace("redis_prefix: tiny}",
                                                          "redis_prefix: tiny, job: kappa-stream}")
    (folder / "pipeline.yaml").write_text(spec)
    assert lines_of(folder) == [
        "pipeline tiny: code: no record codec for streaming.job kappa-stream; set pipeline.records to a "
        "jobs.streaming.codec.RecordCodec, or run the pipeline on the engine (job: engine)"]


def test_a_generator_or_collect_file_named_but_missing_is_one_line_each(tmp_path: Path) -> None:
    folder = write(tmp_path, "tiny")
    spec = (folder / "pipeline.yaml").read_text()
    (folder / "pipeline.yaml").write_text(spec + "generator: gen.py\ncollect: check.py\n")
    assert lines_of(folder) == [
        "pipeline tiny: generator: gen.py does not exist beside pipeline.yaml; create it or fix `generator:`",
        "pipeline tiny: collect: check.py does not exist beside pipeline.yaml; create it or fix `collect:`"]


def test_serve_filters_keep_off_the_services_own_parameters(tmp_path: Path) -> None:
    folder = write(tmp_path, "tiny")
    spec = (folder / "pipeline.yaml").read_text()
    (folder / "pipeline.yaml").write_text(
        spec + "serve:\n  filters:\n    stream: {plural: colours, fields: [colour]}\n")
    [line] = lines_of(folder)
    assert line.startswith("pipeline tiny: pipeline.yaml: serve.filters: ") and "['stream']" in line, line


def test_fields_gold_transforms_and_shared_names_are_checked(tmp_path: Path) -> None:
    folder = write(tmp_path, "tiny", kind="tumbling", extra=", window_s: 60")
    spec = (folder / "pipeline.yaml").read_text().replace("key: colour", "key: shade")
    spec += "  gold.tiny_daily: {gold: tiny_daily}\n"
    (folder / "pipeline.yaml").write_text(spec)
    assert lines_of(folder) == [
        "pipeline tiny: views.per_colour: field 'shade' is not in the analyzed schema; add it to the "
        "schema or name another field",
        "pipeline tiny: tables.gold.tiny_daily: gold transform 'tiny_daily' is not registered; add "
        "@pipeline.gold('tiny_daily') to the code"]

    twin = write(tmp_path / "more", "twin")
    (twin / "pipeline.yaml").write_text((twin / "pipeline.yaml").read_text().replace(
        "redis_prefix: twin", "redis_prefix: tiny"))
    shared = [line for line in lines_of(folder, twin) if line.startswith("pipelines ")]
    assert shared == ["pipelines tiny, twin: Redis prefix 'tiny' is declared by each; give each "
                      "pipeline its own"]


def test_the_cli_validates_with_one_line_per_problem_and_exit_1(tmp_path: Path) -> None:
    write(tmp_path, "tiny", kind="sliding", extra=", window_s: 600, slide_s: 70")
    env = {**os.environ, PATH_ENV: str(tmp_path)}
    done = subprocess.run([*KAPPA, "pipelines", "validate", "tiny"], env=env, cwd=REPO, text=True,
                          capture_output=True, timeout=120, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = done.stdout.splitlines()
    assert line.startswith("pipeline tiny: pipeline.yaml: views.per_colour") and "slide_s 70" in line
    unknown = subprocess.run([*KAPPA, "pipelines", "show", "nope"], env=env, cwd=REPO, text=True,
                             capture_output=True, timeout=120, check=False)
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: no pipeline 'nope'"), unknown.stderr
    listed = subprocess.run([*KAPPA, "pipelines", "list"], env=env, cwd=REPO, text=True,
                            capture_output=True, timeout=120, check=True)
    assert "rsvp: source rsvps.raw" in listed.stdout and "tiny (invalid" in listed.stdout


GOLD_READS = '''
from jobs.pipelines import Source

@pipeline.gold("tiny_daily", reads=(Source("silver.tiny", "id long, event_date date", "event_date"),
                                    Source("ops.tiny_dlq", "reason_code string", None)))
def tiny_daily(silver, dlq):
    """How many of each per day?

    More words.
    """
    return ("built", silver, dlq)
'''


def test_a_gold_transform_reads_its_declared_sources_in_order_and_names_its_job(tmp_path: Path) -> None:
    from jobs.engine.lake.gold import gold_jobs

    folder = write(tmp_path, "tiny", code=GOLD_READS)
    (folder / "pipeline.yaml").write_text((folder / "pipeline.yaml").read_text()
                                          + "  gold.tiny_daily: {gold: tiny_daily}\n")
    assert lines_of(folder) == [
        "pipeline tiny: code: gold transform 'tiny_daily' reads ops.tiny_dlq, which tables does not "
        "declare; declare the table or read another"]
    loaded = load(folder)
    [job] = gold_jobs(loaded.spec, loaded.code)
    assert (job.name, job.table, job.family, job.date_column) == ("tiny_daily", "gold.tiny_daily", "gold",
                                                                  "event_date")
    assert [(s.table, s.date_column) for s in job.sources] == [("silver.tiny", "event_date"),
                                                               ("ops.tiny_dlq", None)]
    assert job.question == "How many of each per day?"
    assert job.build({"ops.tiny_dlq": "dead", "silver.tiny": "rows"}) == ("built", "rows", "dead")


def test_kappa_batch_acts_on_the_pipeline_named_or_the_configured_one() -> None:
    def kappa(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*KAPPA, "batch", *args], env=dict(os.environ), cwd=REPO, capture_output=True,
                              text=True, timeout=120, check=False)

    cards = kappa("list", "--pipeline", "cards", "--json")
    assert cards.returncode == 0, cards.stderr
    assert [(row["job"], row["table"], row["dag"]) for row in json.loads(cards.stdout)] == [
        ("flags_by_country_daily", "gold.card_flags_country_daily", "pipeline_cards_gold"),
        ("flags_by_merchant_daily", "gold.card_flags_merchant_daily", "pipeline_cards_gold")]
    rsvp = kappa("list", "--json")   # conf/base.yaml: pipelines.default rsvp
    assert [(row["job"], row["dag"]) for row in json.loads(rsvp.stdout)] == [
        ("city_daily", "batch_gold"), ("topic_daily", "batch_gold"), ("event_stats", "batch_gold"),
        ("dlq_daily", "batch_ops")]
    wrong = kappa("run", "city_daily", "--pipeline", "cards", "--from", "2026-01-01", "--to", "2026-01-02")
    assert wrong.returncode == 2
    assert ("unknown batch job 'city_daily'; known: flags_by_country_daily, flags_by_merchant_daily"
            in wrong.stderr)
    ranged = kappa("reconcile", "--pipeline", "cards", "--from", "2026-01-01", "--to", "2026-01-02")
    assert ranged.returncode == 2 and "pipeline cards reconciles whole views" in ranged.stderr


def test_kappa_demo_runs_the_pipelines_demo_file_and_refuses_a_pipeline_without_one(tmp_path: Path) -> None:
    from jobs.pipelines.registry import load_hook

    [rsvp] = [folder for folder in discover({}) if folder.name == "rsvp"]
    spec = load(rsvp).spec
    assert spec is not None and spec.demo == "demo.py"
    assert load_hook(rsvp, spec, "demo").__name__ == "run"   # `make demo`: pipelines/rsvp/demo.py
    folder = write(tmp_path, "tiny")
    (folder / "pipeline.yaml").write_text((folder / "pipeline.yaml").read_text() + "demo: show.py\n")
    assert lines_of(folder) == [
        "pipeline tiny: demo: show.py does not exist beside pipeline.yaml; create it or fix `demo:`"]
    (folder / "show.py").write_text("def run(cfg, say):\n    say(f'demo of {cfg.pipelines.default}')\n"
                                    "    return 3\n")
    env = {**os.environ, PATH_ENV: str(tmp_path)}

    def kappa(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*KAPPA, "demo", *args], env=env, cwd=REPO, text=True, capture_output=True,
                              timeout=120, check=False)

    ran = kappa("--pipeline", "tiny")
    assert (ran.returncode, ran.stdout) == (3, "demo of tiny\n"), ran.stderr   # its config, its exit code
    none = kappa("--pipeline", "cards")
    assert none.returncode == 2 and none.stdout == ""
    assert none.stderr.startswith("error: pipeline cards has no demo (no `demo:` in its pipeline.yaml)")
