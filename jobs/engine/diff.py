"""Two view versions of a pipeline compared key by key (``kappa pipelines diff``).

Every key of every view (jobs/engine/reads.py ``snapshot``: hashes field by field, sorted sets
with their scores, HyperLogLogs by their count) under each version's prefix; the fence, keyed
state and metrics (bookkeeping, not the views) are left out. Two versions that read the same
records with the same code hold equal views; a diff taken while one of them is behind shows the
lag as changes.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from jobs.engine.reads import snapshot
from jobs.engine.versions import Version
from jobs.pipelines.spec import PipelineSpec


def diff_versions(client: redis.Redis, spec: PipelineSpec, left: Version, right: Version) -> dict[str, Any]:
    """The report: keys equal, changed, only in one of the two, per view."""
    a, b = snapshot(client, left.prefix, spec.views), snapshot(client, right.prefix, spec.views)
    changed = sorted(key for key in a.keys() & b.keys() if a[key] != b[key])
    per_view: dict[str, int] = {}
    for key in [*changed, *(a.keys() ^ b.keys())]:
        view = key.split(":", 1)[0]
        per_view[view] = per_view.get(view, 0) + 1
    return {"pipeline": spec.name, "current": left.number, "version": right.number,
            "prefixes": {left.number: left.prefix, right.number: right.prefix},
            "taken_ms": int(time.time() * 1000), "keys_equal": len(a.keys() & b.keys()) - len(changed),
            "keys_changed": len(changed), "changed_keys": changed,
            "only_in_current": sorted(a.keys() - b.keys()), "only_in_version": sorted(b.keys() - a.keys()),
            "differing_keys_per_view": dict(sorted(per_view.items()))}
