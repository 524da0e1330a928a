"""Where the project is and where its pipelines are looked for.

The paths searched are the project's ``pipelines/`` folder, then any in ``KAPPA_PIPELINES_PATH``
(separated by ``os.pathsep``): the config reads the default pipeline's ``pipeline.yaml`` from them
(:mod:`jobs.config.load`), the registry loads pipelines from them (:mod:`jobs.pipelines.registry`).
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SPEC_FILE = "pipeline.yaml"
PATH_ENV = "KAPPA_PIPELINES_PATH"


def search_paths(environ: dict[str, str] | None = None) -> list[Path]:
    """Where pipeline folders are looked for, in order."""
    environ = dict(os.environ) if environ is None else environ
    extra = [Path(p) for p in environ.get(PATH_ENV, "").split(os.pathsep) if p.strip()]
    return [PROJECT_ROOT / "pipelines", *extra]
