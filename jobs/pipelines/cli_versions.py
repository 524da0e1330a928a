"""``kappa pipelines reprocess | diff | promote | status | stop``: a pipeline's view versions and runs.

A new version is built from the log beside the current one (its own prefix, outputs and
query), compared key by key, and made current with one pointer record (jobs/engine/versions.py).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from jobs.errors import ConfigError
from jobs.pipelines.cli import JSON_OPTION, _one, _param, pipelines_app

NEW_VERSION = typer.Option("--version", help="The version to build, compare or promote (>= 2).")
MAX_BEHIND = 100_000


def _spec(name: str) -> Any:
    item, _ = _one(name)
    if item.spec is None:
        raise ConfigError(f"pipeline {name}: {item.problems[0]}")
    return item


def _checked(number: int) -> int:
    if number < 2:
        raise ConfigError(f"--version {number}: version 1 is the pipeline's first; build 2 or later")
    return number


@pipelines_app.command("reprocess")
def reprocess(
    name: Annotated[str, typer.Argument(help="The pipeline's name.")],
    version_number: Annotated[int, NEW_VERSION],
    params: Annotated[list[str] | None, typer.Option(
        "--param", help="NAME=VALUE: the version's params that differ from the declared (repeatable).")
                              ] = None,
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Build view version --version from the whole log (the current one keeps serving).

    Runs the pipeline's code over the source from its earliest offset to its end now, into the
    version's own Redis prefix and outputs, with the given params; run again, it resumes. Then
    compare (`diff`), make it current (`promote`) and run it live (`kappa pipelines run NAME`).
    """
    from jobs.config.load import load_config
    from jobs.engine.run import PipelineRun, run_pipeline
    from jobs.engine.versions import pipeline_views, record_building, version

    item, cfg = _spec(name), load_config()
    number = _checked(version_number)
    views = pipeline_views(cfg, item.spec)
    if number == views.current:
        raise ConfigError(f"version {number} of pipeline {name} is the current one; build a new version")
    overrides = dict(map(_param, params or []))
    recorded = views.versions.get(number, {}).get("params")
    if recorded is not None and recorded != overrides:
        raise ConfigError(f"version {number} of pipeline {name} was started with params {recorded}; give the "
                          "same params to resume it, or build another version")
    record_building(cfg, item.spec, number, overrides)
    chosen = version(item.spec, number)
    report = run_pipeline(cfg, item, PipelineRun(
        mode="replay", starting="earliest", ending=None, prefix=chosen.prefix, query=chosen.query,
        output_suffix=chosen.output_suffix, params=overrides),
        progress=lambda line: typer.echo(line, err=True))
    report |= {"version": number, "params": overrides}
    typer.echo(json.dumps(report) if as_json else
               f"pipeline {name} version {number} built: {report['valid_rows']} records, "
               f"{report['dlq_rows']} dead-lettered, in {report['duration_s']:.1f} s "
               f"(prefix {chosen.prefix}); "
               f"next: kappa pipelines diff {name} --version {number}")


@pipelines_app.command("diff")
def diff(
    name: Annotated[str, typer.Argument(help="The pipeline's name.")],
    version_number: Annotated[int, NEW_VERSION],
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Compare view version --version with the current one, key by key."""
    from jobs.config.load import load_config
    from jobs.engine.diff import diff_versions
    from jobs.engine.versions import pipeline_views, version
    from jobs.streaming.redis_sink import connect

    item, cfg = _spec(name), load_config()
    views = pipeline_views(cfg, item.spec)
    client = connect(cfg)
    try:
        report = diff_versions(client, item.spec, version(item.spec, views.current, views),
                               version(item.spec, _checked(version_number), views))
    finally:
        client.close()
    if as_json:
        typer.echo(json.dumps(report))
        return
    typer.echo(f"pipeline {name}: version {views.current} (current) vs {version_number}: "
               f"{report['keys_equal']} keys equal, {report['keys_changed']} changed, "
               f"{len(report['only_in_current'])} only in {views.current}, "
               f"{len(report['only_in_version'])} only in {version_number}")
    for view, count in report["differing_keys_per_view"].items():
        typer.echo(f"  {view}: {count} keys differ")


@pipelines_app.command("promote")
def promote(
    name: Annotated[str, typer.Argument(help="The pipeline's name.")],
    version_number: Annotated[int, NEW_VERSION],
    max_behind: Annotated[int, typer.Option(
        "--max-behind", help="Refuse when the version is more records than this behind the log.")
                    ] = MAX_BEHIND,
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Make view version --version current: readers switch at once; then run it live.

    After the switch, stop the live run of the previous version and start `kappa pipelines run
    NAME` (it runs the current version, resuming where the build stopped).
    """
    from jobs.config.load import load_config
    from jobs.engine.versions import pipeline_views, version
    from jobs.engine.versions import promote as switch
    from jobs.streaming.redis_sink import connect

    item, cfg = _spec(name), load_config()
    number = _checked(version_number)
    views = pipeline_views(cfg, item.spec)
    if number not in views.versions:
        raise ConfigError(f"pipeline {name} has no version {number}; build it with "
                          f"`kappa pipelines reprocess {name} --version {number}`")
    if number == views.current:
        raise ConfigError(f"version {number} of pipeline {name} is already current")
    behind = _behind(cfg, item.spec, version(item.spec, number).prefix, connect)
    if behind is None:
        raise ConfigError(f"the source topic {item.spec.source.topic} cannot be read; check Kafka "
                          "(`kappa doctor`) and promote again")
    if behind > max_behind:
        raise ConfigError(f"version {number} is {behind} records behind the log (--max-behind "
                          f"{max_behind}); let it catch up (`kappa pipelines run {name} --version "
                          f"{number}`) and promote again")
    switch(cfg, item.spec, number, views)
    result = {"pipeline": name, "current": number, "previous": views.current, "behind": behind}
    typer.echo(json.dumps(result) if as_json else
               f"pipeline {name}: version {number} is current (previous {views.current}, {behind} records "
               f"behind the log); restart its live run: kappa pipelines run {name}")


def _behind(cfg: Any, spec: Any, prefix: str, connect: Any) -> int | None:
    """Records of the source the version's fence has not reached (None: the source cannot be read)."""
    from confluent_kafka import KafkaException

    from jobs.streaming.fence_fields import parse_fence
    from jobs.streaming.preflight import watermarks

    client = connect(cfg)
    try:
        fence = parse_fence(client.hgetall(f"{prefix}:fence"))
    finally:
        client.close()
    try:
        marks = watermarks(cfg, [(spec.source.topic, p) for p in range(spec.source.partitions)])
    except KafkaException:  # no such topic (yet), or Kafka down
        return None
    return sum(max(0, high - fence.get(tp, low)) for tp, (low, high) in marks.items())


@pipelines_app.command("stop")
def stop(
    name: Annotated[str, typer.Argument(help="The pipeline's name.")],
    version_number: Annotated[int | None, typer.Option(
        "--version", help="The view version whose run stops (default: the current one).")] = None,
    grace_s: Annotated[float, typer.Option("--grace", help="Seconds before SIGKILL.")] = 300.0,
) -> None:
    """Stop a pipeline's run gracefully (it finishes its batch), SIGKILL after --grace."""
    from jobs.config.load import load_config
    from jobs.engine.versions import pipeline_views
    from jobs.host.processes import registered, stop_registered
    from jobs.pipelines.cli import process_name

    item, cfg = _spec(name), load_config()
    number = version_number if version_number is not None else pipeline_views(cfg, item.spec).current
    target = process_name(name, number)
    if target not in {entry.name for entry in registered(cfg)}:
        typer.echo(f"no run of pipeline {name} version {number} is registered ({target})")
        return
    for entry in stop_registered(cfg, grace_s=grace_s, progress=lambda line: typer.echo(line, err=True),
                                 names=(target,)):
        typer.echo(f"stopped {entry.name} (pid {entry.pid})")


@pipelines_app.command("status")
def status(
    name: Annotated[str, typer.Argument(help="The pipeline's name.")],
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Each view version: state, params, its run's pid (if running), last batch, records behind the log."""
    import time

    from jobs.config.load import load_config
    from jobs.engine.versions import pipeline_views, version
    from jobs.streaming.redis_sink import connect
    from jobs.streaming.state import checkpoint_path, lock_holder

    item, cfg = _spec(name), load_config()
    views = pipeline_views(cfg, item.spec)
    client = connect(cfg)
    rows: list[dict[str, Any]] = []
    try:
        for number in sorted({1, views.current, *views.versions}):
            chosen = version(item.spec, number, views)
            raw = client.hget(f"{chosen.prefix}:metrics", chosen.query)
            last = json.loads(raw) if raw else None
            rows.append({"version": number, "state": views.state(number), "prefix": chosen.prefix,
                         "query": chosen.query, "params": chosen.params,
                         "pid": lock_holder(checkpoint_path(cfg.lake.checkpoint_root, chosen.query)),
                         "last_batch": last, "last_batch_age_s": None if last is None else
                         round(time.time() - last["emitted_ms"] / 1000, 1),
                         "behind": _behind(cfg, item.spec, chosen.prefix, connect)})
    finally:
        client.close()
    if as_json:
        typer.echo(json.dumps(rows))
        return
    for row in rows:
        running = f"running (pid {row['pid']})" if row["pid"] else "NOT running"
        last = ("no batch yet" if row["last_batch"] is None else
                f"last batch {row['last_batch']['batch_id']} {row['last_batch_age_s']} s ago")
        behind = (f"{row['behind']} records behind" if row["behind"] is not None else
                  f"its source {item.spec.source.topic} cannot be read (not created yet? Kafka down?)")
        typer.echo(f"v{row['version']} {row['state']}: prefix {row['prefix']}, params "
                   f"{row['params'] or 'as declared'}, query {row['query']} {running}, {last}, {behind}")


@pipelines_app.command("retire")
def retire(
    name: Annotated[str, typer.Argument(help="The pipeline's name.")],
    version_number: Annotated[int, NEW_VERSION],
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Delete a non-current view version: its Redis keys, its output topics and its checkpoint."""
    from confluent_kafka.admin import AdminClient

    from jobs.config.load import load_config
    from jobs.engine.run import output_topic
    from jobs.engine.versions import pipeline_views, scope, version
    from jobs.host.processes import registered
    from jobs.lake import statefs
    from jobs.pipelines.cli import process_name
    from jobs.streaming.redis_sink import connect
    from jobs.streaming.state import checkpoint_path
    from jobs.views.versions import RETIRED, record_version

    item, cfg = _spec(name), load_config()
    number = _checked(version_number)
    views = pipeline_views(cfg, item.spec)
    if number == views.current:
        raise ConfigError(f"version {number} of pipeline {name} is current; promote another version first")
    if process_name(name, number) in {entry.name for entry in registered(cfg)}:
        raise ConfigError(f"version {number} of pipeline {name} still runs; stop it first "
                          f"(`kappa pipelines stop {name} --version {number}`)")
    chosen = version(item.spec, number, views)
    client = connect(cfg)
    try:
        keys = list(client.scan_iter(match=f"{chosen.prefix}:*", count=1000))
        for at in range(0, len(keys), 1000):
            client.delete(*keys[at:at + 1000])
    finally:
        client.close()
    topics = [output_topic(decl.topic, chosen.output_suffix) for decl in (item.spec.outputs.analyzed,
                                                                           item.spec.outputs.dlq)]
    for future in AdminClient(cfg.kafka.client_config()).delete_topics(topics, operation_timeout=30).values():
        try:
            future.result(timeout=30)
        except Exception:  # a topic that is gone already is what we want
            pass
    checkpoint = checkpoint_path(cfg.lake.checkpoint_root, chosen.query)
    statefs.delete_tree(checkpoint)
    record_version(cfg, number, RETIRED, scope=scope(item.spec), params=chosen.params)
    result = {"pipeline": name, "version": number, "redis_keys_deleted": len(keys), "topics_deleted": topics}
    typer.echo(json.dumps(result) if as_json else
               f"retired version {number} of pipeline {name}: {len(keys)} Redis keys, topics "
               f"{', '.join(topics)}")
