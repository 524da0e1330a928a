"""A dry run of pipeline definitions: every problem, one readable line each, nothing started.

Checks, beyond what :mod:`jobs.pipelines.registry` finds loading each folder: the code registers
a parser, a transform and the analyzed schema (and a record codec when ``kappa stream`` runs the
pipeline); every field a view, table or keyed state names
exists in that schema (or is one the engine adds); every gold transform and lake query a table
or reconcile names is registered, and every table a gold transform reads is declared; and no two
pipelines share a topic, a Redis prefix, a query name or a table.
"""

from __future__ import annotations

from collections import defaultdict

from jobs.pipelines.registry import Loaded
from jobs.pipelines.spec import PipelineSpec

ENGINE_FIELDS = ("source_topic", "source_partition", "source_offset", "late")
"""Fields the engine adds to every analyzed record."""


def problems(pipelines: list[Loaded]) -> list[str]:
    """Every problem of these pipelines: ``pipeline <name>: <where>: <what>; <what to do>``."""
    found = []
    for item in pipelines:
        own = list(item.problems)
        if item.spec is not None and item.code is not None:
            own += _code(item)
        found += [f"pipeline {item.name}: {line}" for line in own]
    return found + _shared([item.spec for item in pipelines if item.spec is not None])


def _code(item: Loaded) -> list[str]:
    spec, code = item.spec, item.code
    assert spec is not None and code is not None
    out = []
    if code.parse_fn is None:
        out.append("code: no parser; register one with @pipeline.parse")
    if code.analyze_fn is None:
        out.append("code: no transform; register one with @pipeline.analyze")
    if spec.streaming.job == "kappa-stream" and code.records is None:
        out.append("code: no record codec for streaming.job kappa-stream; set pipeline.records to a "
                   "jobs.streaming.codec.RecordCodec, or run the pipeline on the engine (job: engine)")
    if code.analyzed_schema is None:
        out.append("code: no analyzed schema; set pipeline.analyzed_schema to a pyarrow schema")
        return out
    fields = set(code.analyzed_schema.names) | set(ENGINE_FIELDS)
    out += _fields(spec, fields)
    for table, decl in spec.tables.items():
        if decl.gold is not None and decl.gold not in code.gold_fns:
            out.append(f"tables.{table}: gold transform {decl.gold!r} is not registered; add "
                       f"@pipeline.gold({decl.gold!r}) to the code")
    for transform, reads in code.gold_reads.items():
        out += [f"code: gold transform {transform!r} reads {source.table}, which tables does not declare; "
                "declare the table or read another" for source in reads if source.table not in spec.tables]
    for view, query in spec.reconcile.items():
        if view not in spec.views:
            out.append(f"reconcile.{view}: no such view; declare it under views or remove the entry")
        if query not in code.lake_queries:
            out.append(f"reconcile.{view}: lake query {query!r} is not registered; add "
                       f"@pipeline.lake_query({query!r}) to the code")
    return out


def _fields(spec: PipelineSpec, fields: set[str]) -> list[str]:
    """A line per declared field the analyzed schema lacks."""
    named: list[tuple[str, str]] = [("event_time.field", spec.event_time.field)]
    named += [(f"views.{view}", name) for view, decl in spec.views.items() for name in sorted(decl.fields())]
    named += [(f"tables.{table}.dedup_key", name) for table, decl in spec.tables.items()
              for name in decl.dedup_key or []]
    if spec.state is not None:
        named.append(("state.key", spec.state.key))
    return [f"{where}: field {name!r} is not in the analyzed schema; add it to the schema or name "
            "another field" for where, name in named if name not in fields]


def _shared(specs: list[PipelineSpec]) -> list[str]:
    """A line per topic, Redis prefix, query name or table declared by more than one pipeline."""
    owners: dict[tuple[str, str], list[str]] = defaultdict(list)
    for spec in specs:
        things = [("topic", name) for name in spec.topics()]
        things += [("Redis prefix", spec.streaming.redis_prefix), ("query name", spec.streaming.query_name)]
        things += [("table", name) for name in spec.tables]
        for thing in dict.fromkeys(things):
            owners[thing].append(spec.name)
    return [f"pipelines {', '.join(names)}: {kind} {value!r} is declared by each; give each pipeline "
            "its own" for (kind, value), names in owners.items() if len(names) > 1]
