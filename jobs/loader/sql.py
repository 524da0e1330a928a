"""``kappa sql``: read-only DuckDB SQL over every Delta table of the lake.

Each table is a delta-rs ``to_pyarrow_dataset()`` (the live file list from the Delta log, never
a plain Parquet read of the folder), registered as the view ``<schema>_<table>`` and, for
readable SQL, as ``<schema>.<table>`` (a DuckDB schema per lake schema). Both names work.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from pathlib import Path
from typing import Any

from jobs.common.config import KappaConfig
from jobs.common.delta import local_path, open_delta, table_uri
from jobs.common.errors import ConfigError, KappaError
from jobs.loader.tables import AUDIT_TABLE, QUALITY_TABLE, SPECS

logger = logging.getLogger(__name__)

READ_ONLY = ("select", "with", "describe", "show", "summarize", "explain", "from", "pragma")
FORMATS = ("table", "json", "csv")


class SqlError(KappaError):
    """The query failed in DuckDB."""


def table_names(cfg: KappaConfig) -> list[str]:
    """Every Delta table under the lake root (``schema.table``), known ones first."""
    names = [*SPECS, AUDIT_TABLE, QUALITY_TABLE]
    root = local_path(cfg.lake.root)
    if root is not None and root.is_dir():
        found = sorted(f"{log.parent.parent.name}.{log.parent.name}"
                       for log in Path(root).glob("*/*/_delta_log"))
        names += [name for name in found if name not in names]
    return names


def connect(cfg: KappaConfig) -> Any:
    """A DuckDB connection with every existing table registered by name.

    The base names of the view tables (``silver.rsvps``, ``gold.rsvp_summaries``, ...) read the
    current view version's tables (docs/reprocess.md); ``silver.rsvps_v2`` names a version's own.
    """
    import duckdb

    con = duckdb.connect()
    aliases = {versioned: base for base, versioned in _current_tables(cfg).items() if versioned != base}
    for name in table_names(cfg):
        table = open_delta(table_uri(cfg.lake.root, name))
        if table is None:
            continue
        for shown in (name, aliases.get(name)) if name in aliases else (name,):
            assert shown is not None
            schema, _, short = shown.partition(".")
            flat = f"{schema}_{short}"
            con.execute(f'DROP VIEW IF EXISTS "{flat}"')
            con.register(flat, table.to_pyarrow_dataset())
            con.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            con.execute(f'CREATE OR REPLACE VIEW "{schema}"."{short}" AS SELECT * FROM "{flat}"')
    return con


def _current_tables(cfg: KappaConfig) -> dict[str, str]:
    """Base table name -> the current view version's table (base names when Kafka cannot say)."""
    from jobs.common.views import ViewsError, current_version, table_aliases

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

    con = connect(cfg)
    try:
        cursor = con.execute(query)
        return [column[0] for column in cursor.description or []], cursor.fetchall()
    except duckdb.Error as exc:
        raise SqlError(f"{exc}; tables are named schema.table or schema_table, see docs/tables.md "
                       f"(present: {', '.join(_present(cfg)) or 'none yet: run kappa load'})") from exc
    finally:
        con.close()


def _present(cfg: KappaConfig) -> list[str]:
    return [name for name in table_names(cfg) if open_delta(table_uri(cfg.lake.root, name))]


def render(columns: list[str], rows: list[tuple], fmt: str) -> str:
    """Rows as an aligned text table, JSON (a list of objects) or CSV with a header."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if fmt == "json":
        return json.dumps([dict(zip(columns, row, strict=True)) for row in rows], default=str, indent=2)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
        return out.getvalue().rstrip("\n")
    cells = [columns, *[["" if v is None else str(v) for v in row] for row in rows]]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([*lines, f"({len(rows)} rows)"])
