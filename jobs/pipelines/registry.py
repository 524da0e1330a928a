"""Finding and loading pipelines: ``<path>/<name>/pipeline.yaml`` plus the code file it names.

The paths searched (:mod:`jobs.config.paths`) are the project's ``pipelines/`` folder, then any
in ``KAPPA_PIPELINES_PATH`` (separated by ``os.pathsep``), so a pipeline kept elsewhere (a team's
repository, a test's folder) needs no change inside the project. Loading never raises for a
broken pipeline: it returns what it could read and the problems, each one line
(:mod:`jobs.pipelines.validate`).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

import yaml
from pydantic import ValidationError

from jobs.config.paths import SPEC_FILE, search_paths
from jobs.errors import ConfigError
from jobs.pipelines.spec import PipelineSpec

if TYPE_CHECKING:
    from jobs.pipelines.define import Definitions

HOOKS = {"generator": "lines", "collect": "check", "summaries": "read", "demo": "run"}
"""The light files a pipeline may name beside its code (each imported alone, without the code), and
the function each defines: for the collector tier (:mod:`jobs.pipelines.generate`,
:mod:`jobs.pipelines.structure`), ``kappa summaries`` and ``kappa demo``."""


@dataclass
class Loaded:
    """One pipeline folder as loaded: its spec and code when they could be read, and problems."""

    folder: Path
    spec: PipelineSpec | None = None
    code: Definitions | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The declared name, else the folder's."""
        return self.spec.name if self.spec is not None else self.folder.name


def discover(environ: dict[str, str] | None = None) -> list[Path]:
    """Every folder holding a ``pipeline.yaml`` under the search paths."""
    found: list[Path] = []
    for root in search_paths(environ):
        if root.is_dir():
            found += sorted(p.parent for p in root.glob(f"*/{SPEC_FILE}"))
    return found


def find(name: str | None, default: str | None = None) -> Path:
    """The folder of pipeline ``name`` (None: ``default``, else the only one found).

    ConfigError naming the pipelines found when there is no such pipeline, or several and no name.
    """
    folders = {folder.name: folder for folder in discover()}
    wanted = name or default
    if wanted is None:
        if len(folders) != 1:
            raise ConfigError(f"{len(folders)} pipelines ({', '.join(sorted(folders)) or 'none'}); say "
                              "which with --pipeline NAME or set pipelines.default in the config")
        wanted = next(iter(folders))
    if wanted not in folders:
        raise ConfigError(f"no pipeline {wanted!r}; the pipelines are: "
                          f"{', '.join(sorted(folders)) or 'none'}")
    return folders[wanted]


def resolve(name: str | None, default: str | None = None) -> Loaded:
    """Pipeline ``name`` (as :func:`find`) loaded whole; ConfigError naming its first problem otherwise."""
    loaded = load(find(name, default))
    if loaded.problems or loaded.spec is None or loaded.code is None:
        raise ConfigError(f"pipeline {loaded.name}: {loaded.problems[0] if loaded.problems else 'no code'}; "
                          f"run `kappa pipelines validate {loaded.name}`")
    return loaded


def load(folder: Path) -> Loaded:
    """Read a pipeline folder's spec and import its code."""
    loaded = load_spec(folder)
    if loaded.spec is None:
        return loaded
    loaded.code, problem = _import(folder / loaded.spec.code, loaded.spec.name)
    if problem:
        loaded.problems.append(problem)
    for key in HOOKS:
        file = getattr(loaded.spec, key)
        if file is not None and not (folder / file).is_file():
            loaded.problems.append(f"{key}: {file} does not exist beside {SPEC_FILE}; create it or fix "
                                   f"`{key}:`")
    return loaded


def load_spec(folder: Path) -> Loaded:
    """Read a pipeline folder's ``pipeline.yaml`` only: its code is not imported (``code`` stays None).

    For what must stay cheap and must not run a pipeline's code, such as parsing the DAG factory
    (dags/pipeline_factory.py).
    """
    loaded = Loaded(folder)
    try:
        data = yaml.safe_load((folder / SPEC_FILE).read_text())
        loaded.spec = PipelineSpec.model_validate(data)
    except (OSError, yaml.YAMLError) as exc:
        loaded.problems.append(f"{SPEC_FILE}: cannot be read ({_one_line(exc)}); fix the file")
        return loaded
    except ValidationError as exc:
        loaded.problems += [f"{SPEC_FILE}: {'.'.join(map(str, err['loc']))}: {err['msg']}"
                            for err in exc.errors()]
        return loaded
    if loaded.spec.name != folder.name:
        loaded.problems.append(f"{SPEC_FILE}: name {loaded.spec.name!r} differs from its folder "
                               f"{folder.name!r}; rename one of them")
    return loaded


def _import(path: Path, name: str) -> tuple[Definitions | None, str | None]:
    """Import a code file and find its :class:`Definitions` (module name ``kappa_pipeline_<name>``)."""
    from jobs.pipelines.define import Definitions

    module, problem = _exec(path, f"kappa_pipeline_{name}", "code")
    if module is None:
        return None, f"code: {problem}"
    found = [value for value in vars(module).values() if isinstance(value, Definitions)]
    if len(found) != 1:
        return None, (f"code: {path.name} defines {len(found)} `definitions(__file__)` objects; "
                      "define exactly one")
    return found[0], None


def load_hook(folder: Path, spec: PipelineSpec, key: str) -> Callable[..., Any] | None:
    """The function of the file a pipeline names with ``key`` (:data:`HOOKS`), or None when it names none.

    Only that file is imported (module name ``kappa_pipeline_<name>_<key>``), not the pipeline's code.

    Raises:
        ConfigError: the file cannot be imported or does not define the function.
    """
    file, function = getattr(spec, key), HOOKS[key]
    if file is None:
        return None
    module, problem = _exec(folder / file, f"kappa_pipeline_{spec.name}_{key}", key)
    if module is None:
        raise ConfigError(f"pipeline {spec.name}: {key}: {problem}")
    found = getattr(module, function, None)
    if not callable(found):
        raise ConfigError(f"pipeline {spec.name}: {key}: {file} defines no `{function}` function; define "
                          "one (docs/reference/pipeline-yaml.md)")
    return cast("Callable[..., Any]", found)


def _exec(path: Path, module_name: str, key: str) -> tuple[ModuleType | None, str | None]:
    """Import the Python file a pipeline names with ``key`` as ``module_name``: the module, or the problem."""
    if not path.is_file():
        return None, f"{path.name} does not exist beside pipeline.yaml; create it or fix `{key}:`"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        return None, f"{path.name} cannot be imported; it must be a Python file"
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the pipeline's own code: any error is reported, never raised
        sys.modules.pop(module_name, None)
        return None, f"importing {path.name} failed: {type(exc).__name__}: {_one_line(exc)}"
    return module, None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else repr(exc)
