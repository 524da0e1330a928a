"""A third, tiny pipeline written into a test's folder: a schema, one counter view, one table."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

SPEC = """\
name: {name}
source: {{topic: {source}, key: id, partitions: 2}}
outputs:
  analyzed: {{topic: {source}.out, key: id, partitions: 2}}
  dlq: {{topic: {source}.dlq, partitions: 1}}
streaming: {{query_name: {name}-live, redis_prefix: {name}}}
views:
  colours: {{kind: counter, key: colour}}
tables:
  silver.{name}: {{topic: {source}.out, dedup_key: [id]}}
"""

CODE = '''
import json

import pyarrow as pa

from jobs.pipelines import Reject, definitions

pipeline = definitions(__file__)
pipeline.reasons = ("invalid_json",)
pipeline.analyzed_schema = pa.schema([("id", pa.string()), ("colour", pa.string()),
                                      ("event_time_ms", pa.int64())])


@pipeline.parse
def parse(value, key, params):
    try:
        record = json.loads(value)
    except ValueError:
        raise Reject("invalid_json", "not JSON") from None
    return {"id": str(record["id"]), "colour": record["colour"], "event_time_ms": record["t"]}


@pipeline.analyze
def analyze(record, previous, params):
    return dict(record), None
'''


def write_tiny(root: Path) -> tuple[Path, str, str]:
    """A tiny pipeline under ``root``: (its folder, its name, its source topic)."""
    name = f"tiny{uuid.uuid4().hex[:8]}"
    source = f"{name}.in"
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "pipeline.yaml").write_text(SPEC.format(name=name, source=source))
    (folder / "pipeline.py").write_text(textwrap.dedent(CODE))
    return folder, name, source
