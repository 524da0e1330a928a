"""Registering the kafka-py data source: Spark's look-up of data source packages is skipped only
when there is none to find (jobs/kafka/__init__.py ``skip_static_lookup``)."""

from __future__ import annotations

from jobs.kafka import STATIC_SOURCES, skip_static_lookup


def _looked_up(spark) -> dict[str, object]:
    manager = getattr(getattr(spark.sparkContext._jvm, STATIC_SOURCES), "MODULE$")
    builders = manager.dataSourceBuilders()
    return {"defined": builders.isDefined(), "size": builders.get().size() if builders.isDefined() else None}


def test_the_session_holds_an_empty_look_up_and_kafka_py(spark):
    # build_spark registered kafka-py after setting the look-up's result (no package here): the
    # data source is found by its name, and no package's source is registered
    assert _looked_up(spark) == {"defined": True, "size": 0}
    assert spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists("kafka-py")


def test_a_data_source_package_on_the_path_keeps_the_look_up(spark, tmp_path, monkeypatch):
    (tmp_path / "pyspark_probe_source.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert skip_static_lookup(spark) is False


def test_a_jvm_that_looked_up_already_is_left_alone(spark):
    assert skip_static_lookup(spark) is False  # the session's JVM holds a result: nothing to do
