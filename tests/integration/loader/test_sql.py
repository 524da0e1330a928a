"""`kappa sql` over Delta tables written by delta-rs (no Kafka: the tables are written here)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from jobs.config.load import KappaConfig, load_config
from jobs.loader.sql import SqlError, render, run_sql


@pytest.fixture()
def cfg(tmp_path: Path) -> KappaConfig:
    """A lake holding silver.rsvps: an append, then a delta-rs merge (which writes its strings
    as string_view), then another append."""
    uri = str(tmp_path / "silver" / "rsvps")
    write_deltalake(uri, pa.table({"rsvp_id": [1, 2], "response": ["yes", "no"],
                                   "topics": [["a"], ["b", "c"]]}))
    (DeltaTable(uri).merge(pa.table({"rsvp_id": [2, 3], "response": ["yes", "no"], "topics": [["d"], []]}),
                           "t.rsvp_id = s.rsvp_id", source_alias="s", target_alias="t")
     .when_matched_update_all().when_not_matched_insert_all().execute())
    write_deltalake(uri, pa.table({"rsvp_id": [4], "response": ["yes"], "topics": [["e"]]}), mode="append")
    return load_config("test", environ={"KAPPA_LAKE__ROOT": str(tmp_path)})


def test_string_filters_on_a_merged_table(cfg):
    assert run_sql(cfg, "SELECT rsvp_id FROM silver.rsvps WHERE response = 'yes' ORDER BY 1")[1] == [
        (1,), (2,), (4,)]
    assert run_sql(cfg, "SELECT count(*) FROM silver_rsvps WHERE response IN ('no')")[1] == [(1,)]


def test_only_the_named_tables_are_opened(cfg, tmp_path):
    broken = tmp_path / "ops" / "load_audit" / "_delta_log"
    broken.mkdir(parents=True)
    (broken / "00000000000000000000.json").write_text("{not json\n")
    assert run_sql(cfg, "SELECT count(*) FROM silver.rsvps")[1] == [(4,)]


def test_only_an_unknown_table_gets_the_naming_hint(cfg):
    with pytest.raises(SqlError, match=r"Table with name .*nope.* tables are named schema.table") as unknown:
        run_sql(cfg, "SELECT * FROM silver.nope")
    assert "present: silver.rsvps" in str(unknown.value) and "\n" not in str(unknown.value)
    with pytest.raises(SqlError) as column:
        run_sql(cfg, "SELECT nothing FROM silver.rsvps")
    assert "nothing" in str(column.value) and "tables are named" not in str(column.value)


def test_csv_prints_arrays_as_json(cfg):
    columns, rows = run_sql(cfg, "SELECT rsvp_id, topics, NULL AS state FROM silver.rsvps ORDER BY 1")
    assert render(columns, rows, "csv").splitlines() == [
        "rsvp_id,topics,state", '1,"[""a""]",', '2,"[""d""]",', "3,[],", '4,"[""e""]",']
