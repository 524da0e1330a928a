"""``kappa sql``: read-only DuckDB SQL over the Delta tables of the lake.

Each table is read through delta-rs datasets (the live file list from the Delta log, never a
plain Parquet read of the folder: jobs/lake/delta.py ``readable_datasets``), registered as the
view ``<schema>_<table>`` and, for readable SQL, as ``<schema>.<table>`` (a DuckDB schema per
lake schema). Both names work. Only the tables a query names are opened (all of them when it
names none, e.g. ``SHOW ALL TABLES``): opening a table costs a read of its log and file footers.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
from typing import Any

from jobs.config.load import KappaConfig
from jobs.errors import ConfigError, KappaError
from jobs.lake.delta import open_delta, readable_datasets, table_uri
from jobs.lake.storage import storage_options, table_names_under
from jobs.loader.tables import AUDIT_TABLE, QUALITY_TABLE, spec_of, specs

logger = logging.getLogger(__name__)

READ_ONLY = ("select", "with", "describe", "show", "summarize", "explain", "from", "pragma")
FORMATS = ("table", "json", "csv")


class SqlError(KappaError):
    """The query failed in DuckDB."""


def table_names(cfg: KappaConfig) -> list[str]:
    """Every Delta table under the lake root (``schema.table``), known ones first."""
    names = [*specs(cfg), AUDIT_TABLE, QUALITY_TABLE]
    found = table_names_under(cfg.lake.root, storage_options(cfg.lake))
    return names + [name for name in found if name not in names]


def named_in(query: str, names: list[str]) -> list[str]:
    """The tables of ``names`` that ``query`` may refer to (every one when it names none).

    A table counts when its short name stands in the query between non-alphanumeric characters
    (``silver.events``, ``"silver"."events"``, ``silver_events``); a false match only opens a table
    more.
    """
    found = [name for name in names
             if re.search(rf"(?<![A-Za-z0-9]){re.escape(name.partition('.')[2])}(?![A-Za-z0-9])", query,
                          flags=re.IGNORECASE)]
    return found or names


def connect(cfg: KappaConfig, names: list[str] | None = None) -> Any:
    """A DuckDB connection with the existing tables of ``names`` (default: all) registered.

    The base names of the view tables (the pipeline's tables: ``silver.events``, ...) read the
    current view version's tables (docs/reprocess.md); ``silver.events_v2`` names a version's own.
    """
    import duckdb

    present = table_names(cfg)
    aliases = _aliases(cfg, present)
    wanted = [name for name in present if names is None or name in names or aliases.get(name) in names]
    con = duckdb.connect()
    for name in wanted:
        table = open_delta(table_uri(cfg.lake.root, name), storage_options(cfg.lake))
        if table is None:
            continue
        parts = readable_datasets(table)
        for shown in (name, aliases[name]) if name in aliases else (name,):
            _register(con, shown, parts)
    return con


def _register(con: Any, name: str, parts: list[Any]) -> None:
    """``parts`` (datasets of one table) as the views ``<schema>_<table>`` and ``<schema>.<table>``."""
    schema, _, short = name.partition(".")
    flat = f"{schema}_{short}"
    sources = []
    for dataset in parts:
        source = f"{flat}__{id(dataset)}"
        con.register(source, dataset)
        sources.append(f'SELECT * FROM "{source}"')
    con.execute(f'CREATE OR REPLACE VIEW "{flat}" AS {" UNION ALL BY NAME ".join(sources)}')
    con.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    con.execute(f'CREATE OR REPLACE VIEW "{schema}"."{short}" AS SELECT * FROM "{flat}"')


def _aliases(cfg: KappaConfig, present: list[str]) -> dict[str, str]:
    """Version table -> the base name it is read as, while its version is current.

    The view pointer (a Kafka read) is asked only when the lake holds a version's own table
    (``silver.events_v2``): without one, every base name reads its own table.
    """
    known = specs(cfg)
    if all(name in known or spec_of(known, name) is None for name in present):
        return {}
    return {versioned: base for base, versioned in _current_tables(cfg).items() if versioned != base}


def _current_tables(cfg: KappaConfig) -> dict[str, str]:
    """Base table name -> the current view version's table (base names when Kafka cannot say)."""
    from jobs.views.versions import ViewsError, current_version, table_aliases

    try:
        return table_aliases(cfg, current_version(cfg))
    except ViewsError as exc:
        logger.warning("view pointer unreadable (%s): base tables are read", exc)
        return {}


def run_sql(cfg: KappaConfig, query: str) -> tuple[list[str], list[tuple]]:
    """Run one read-only statement; return column names and rows."""
    words = query.strip().split(None, 1)
    if not words or words[0].lower() not in READ_ONLY:
        raise ConfigError(f"kappa sql runs read-only queries (SELECT / WITH ...); got {query[:40]!r}")
    import duckdb

    con = connect(cfg, named_in(query, table_names(cfg)))
    try:
        cursor = con.execute(query)
        return [column[0] for column in cursor.description or []], cursor.fetchall()
    except duckdb.Error as exc:
        message = _one_line(exc)
        if isinstance(exc, duckdb.CatalogException) and "Table with name" in message:
            message += (f"; tables are named schema.table or schema_table, see docs/tables.md (present: "
                        f"{', '.join(_present(cfg)) or 'none yet: run kappa load'})")
        raise SqlError(message) from exc
    finally:
        con.close()


def _one_line(exc: Exception) -> str:
    """DuckDB's message without the query excerpt it appends (``LINE 1: ...`` and a caret)."""
    lines = str(exc).split("\nLINE ")[0].splitlines()
    return " ".join(line.strip() for line in lines if line.strip())


def _present(cfg: KappaConfig) -> list[str]:
    storage = storage_options(cfg.lake)
    return [name for name in table_names(cfg) if open_delta(table_uri(cfg.lake.root, name), storage)]


def render(columns: list[str], rows: list[tuple], fmt: str) -> str:
    """Rows as an aligned text table, JSON (a list of objects) or CSV with a header.

    In CSV, arrays and structs are JSON text and nulls are empty cells.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if fmt == "json":
        return json.dumps([dict(zip(columns, row, strict=True)) for row in rows], default=str, indent=2)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[_csv_cell(value) for value in row] for row in rows])
        return out.getvalue().rstrip("\n")
    cells = [columns, *[["" if v is None else str(v) for v in row] for row in rows]]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([*lines, f"({len(rows)} rows)"])


def _csv_cell(value: Any) -> Any:
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, default=str, ensure_ascii=False)
    return value
