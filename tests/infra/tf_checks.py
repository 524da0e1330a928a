"""Static checks of infra/terraform that need neither terraform nor its providers.

Each ``check_*`` function takes a directory and returns a list of problems, one readable line
each (empty: all good), so the tests can run them on the real tree and on a deliberately broken
copy. ``run_checkov`` runs checkov offline from its own virtualenv. From a shell:
``python -m tests.infra.tf_checks`` prints every problem in the real tree.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hcl2
import yaml

REPO = Path(__file__).resolve().parents[2]
TERRAFORM_ROOT = REPO / "infra" / "terraform"
PROD_CONF = REPO / "conf" / "prod.yaml"
MODULE_FILES = ("main.tf", "variables.tf", "outputs.tf", "versions.tf")
PRIMARY_RESOURCE = "this"

PLACEHOLDER = re.compile(r"\$\{terraform:([A-Za-z0-9_]+)\}")
SKIP_COMMENT = re.compile(r"#\s*checkov:skip=(?P<id>[^:\s]*)(?::(?P<reason>.*))?")
CHECK_ID = re.compile(r"^CKV2?_[A-Z0-9]+_\d+$")
MIN_SKIP_REASON = 20
PUBLIC_ACLS = frozenset({"public-read", "public-read-write", "authenticated-read"})
PUBLIC_ACCESS_FLAGS = (
    "block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets",
)
# A variable whose name says it carries a secret value (not a reference to one).
SECRET_VARIABLE = re.compile(r"(password|passwd|secret|token|api_key|private_key)", re.IGNORECASE)
SECRET_REFERENCE_SUFFIXES = ("_arn", "_arns", "_name", "_id", "_rotation", "_strategy", "_days", "_version")
# An attribute that carries a secret, set to a string literal rather than an expression.
LITERAL_SECRET = re.compile(
    r"^\s*(password|passwd|auth_token|secret_string|master_password|token)\s*=\s*\"(?!\$\{)",
    re.MULTILINE,
)
SECRET_VALUE_REFERENCE = re.compile(r"random_password\.|\.auth_token\b|\.secret_string\b|\.result\b")
# Keys of a partial S3 backend that must come from -backend-config, not the code.
BACKEND_CONFIG_KEYS = ("bucket", "key", "region", "dynamodb_table", "kms_key_id")

# python-hcl2 8 quotes labels and strings and keeps comments unless told otherwise.
_PARSE_OPTIONS = hcl2.SerializationOptions(with_comments=False, strip_string_quotes=True)


class TerraformParseError(ValueError):
    """A .tf file python-hcl2 cannot parse."""


@dataclass(frozen=True)
class Block:
    """One top-level block of a .tf file: kind (resource, variable, ...), labels and body."""

    kind: str
    labels: tuple[str, ...]
    body: dict[str, Any]
    path: Path

    @property
    def address(self) -> str:
        """``resource.aws_s3_bucket.this`` style name, with the file it is in."""
        return f"{'.'.join((self.kind, *self.labels))} ({self.path})"


# --------------------------------------------------------------------------- parsing


def parse_file(path: Path) -> dict[str, Any]:
    """The file as python-hcl2 8.x sees it (labels and strings unquoted, no comments)."""
    stat = path.stat()
    return _parse_cached(path.resolve(), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=512)
def _parse_cached(path: Path, _mtime_ns: int, _size: int) -> dict[str, Any]:
    try:
        return hcl2.loads(path.read_text(encoding="utf-8"), serialization_options=_PARSE_OPTIONS)
    except Exception as exc:  # lark raises several unrelated exception types
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TerraformParseError(f"{path}: not valid HCL2 ({first_line})") from exc


def tf_files(root: Path) -> list[Path]:
    """Every .tf file under root, skipping provider caches (.terraform/)."""
    return sorted(p for p in root.rglob("*.tf") if ".terraform" not in p.parts)


def tf_dirs(root: Path) -> list[Path]:
    """Every directory under root that holds .tf files (each is a module or a root)."""
    return sorted({p.parent for p in tf_files(root)})


def _label_count(kind: str) -> int:
    return {"resource": 2, "data": 2, "terraform": 0, "locals": 0}.get(kind, 1)


def _unwrap(
    kind: str, node: dict[str, Any], labels: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], dict]]:
    if len(labels) == _label_count(kind):
        yield labels, node
        return
    for label, inner in node.items():
        if not label.startswith("__"):
            yield from _unwrap(kind, inner, (*labels, label))


def blocks_in_file(path: Path, kind: str | None = None) -> list[Block]:
    """Top-level blocks of one file, optionally only those of one kind."""
    found = []
    for block_kind, entries in parse_file(path).items():
        if block_kind.startswith("__") or (kind and block_kind != kind):
            continue
        for entry in entries:
            for labels, body in _unwrap(block_kind, entry):
                found.append(Block(block_kind, labels, body, path))
    return found


def blocks_in_dir(directory: Path, kind: str | None = None) -> list[Block]:
    """Top-level blocks of every .tf file directly in directory."""
    return [b for path in sorted(directory.glob("*.tf")) for b in blocks_in_file(path, kind)]


def _references(expression: Any, address: str) -> bool:
    pattern = rf"\b{re.escape(address)}\b(?![\w-])"
    return isinstance(expression, str) and re.search(pattern, expression) is not None


# --------------------------------------------------------------------------- checks


def check_parse(root: Path) -> list[str]:
    """Every .tf file parses with python-hcl2."""
    problems = []
    for path in tf_files(root):
        try:
            parse_file(path)
        except TerraformParseError as exc:
            problems.append(str(exc))
    return problems


def check_variables(root: Path) -> list[str]:
    """Every variable declares a type and a non-empty description."""
    problems = []
    for path in tf_files(root):
        for block in blocks_in_file(path, "variable"):
            if "type" not in block.body:
                problems.append(f"{block.address}: no type; declare one (string, number, list(string), ...)")
            if not str(block.body.get("description", "")).strip():
                problems.append(f"{block.address}: no description; say what the value is for")
    return problems


def check_module_layout(modules_dir: Path) -> list[str]:
    """Each module has main/variables/outputs/versions.tf and a primary resource named ``this``."""
    problems = []
    modules = sorted(d for d in modules_dir.iterdir() if d.is_dir())
    if not modules:
        return [f"{modules_dir}: no modules found"]
    for module in modules:
        missing = [name for name in MODULE_FILES if not (module / name).is_file()]
        if missing:
            layout = ", ".join(MODULE_FILES)
            problems.append(f"{module}: missing {', '.join(missing)} (house layout is {layout})")
        resources = []
        for path in sorted(module.glob("*.tf")):
            try:
                resources += blocks_in_file(path, "resource")
            except TerraformParseError as exc:
                problems.append(str(exc))
        if not any(block.labels[1] == PRIMARY_RESOURCE for block in resources):
            problems.append(
                f"{module}: no resource named {PRIMARY_RESOURCE!r}; name the module's primary resource 'this'"
            )
        if (module / "versions.tf").is_file() and not blocks_in_file(module / "versions.tf", "terraform"):
            problems.append(f"{module / 'versions.tf'}: no terraform block pinning the providers")
    return problems


def check_provider_pins(root: Path) -> list[str]:
    """Every versions.tf pins terraform and each provider's source and version; aws is pinned alike."""
    problems = []
    aws_pins: dict[str, list[Path]] = {}
    for path in sorted(root.rglob("versions.tf")):
        settings = blocks_in_file(path, "terraform")
        if not settings:
            problems.append(f"{path}: no terraform block")
            continue
        body = settings[0].body
        if "required_version" not in body:
            problems.append(f"{path}: no required_version")
        providers = {
            name: spec
            for entry in body.get("required_providers", [])
            for name, spec in entry.items()
            if not name.startswith("__")
        }
        if "aws" not in providers:
            problems.append(f"{path}: the aws provider is not in required_providers")
        for name, spec in providers.items():
            if not isinstance(spec, dict) or not spec.get("source") or not spec.get("version"):
                problems.append(f"{path}: provider {name} needs both source and version")
            elif name == "aws":
                aws_pins.setdefault(spec["version"], []).append(path)
    if len(aws_pins) > 1:
        problems.append(f"aws provider pinned differently: {', '.join(sorted(aws_pins))}; use one constraint")
    return problems


def check_backend(env_dir: Path) -> list[str]:
    """A root has a partial ``backend "s3"`` block: encrypted, locked, locations from -backend-config."""
    backends = [
        entry for block in blocks_in_dir(env_dir, "terraform") for entry in block.body.get("backend", [])
    ]
    s3 = [body for entry in backends for name, body in entry.items() if name == "s3"]
    if len(s3) != 1:
        return [f"{env_dir}: expected one backend \"s3\" block, found {len(s3)}"]
    problems = [
        f"{env_dir}: backend \"s3\" sets {key}; pass it with terraform init -backend-config instead"
        for key in BACKEND_CONFIG_KEYS
        if key in s3[0]
    ]
    for flag in ("encrypt", "use_lockfile"):
        if s3[0].get(flag) is not True:
            problems.append(f"{env_dir}: backend \"s3\" needs {flag} = true")
    return problems


def check_secret_variables(root: Path) -> list[str]:
    """A variable that carries a secret has no default and is marked sensitive."""
    problems = []
    for path in tf_files(root):
        for block in blocks_in_file(path, "variable"):
            name = block.labels[0]
            if not SECRET_VARIABLE.search(name) or name.endswith(SECRET_REFERENCE_SUFFIXES):
                continue
            if "default" in block.body:
                problems.append(f"{block.address}: a secret-bearing variable must have no default")
            if block.body.get("sensitive") is not True:
                problems.append(f"{block.address}: a secret-bearing variable must set sensitive = true")
    return problems


def check_literal_secrets(root: Path) -> list[str]:
    """No password, token or secret string is written as a literal in the code."""
    problems = []
    for path in tf_files(root):
        text = path.read_text(encoding="utf-8")
        for match in LITERAL_SECRET.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            problems.append(
                f"{path}:{line}: {match.group(1)} is a literal; generate it (random_password) or read it"
            )
    return problems


def check_sensitive_outputs(root: Path) -> list[str]:
    """An output that exposes a secret value (not an ARN) is marked sensitive."""
    problems = []
    for directory in tf_dirs(root):
        sensitive_vars = {
            b.labels[0] for b in blocks_in_dir(directory, "variable") if b.body.get("sensitive") is True
        }
        for block in blocks_in_dir(directory, "output"):
            value = str(block.body.get("value", ""))
            secret = SECRET_VALUE_REFERENCE.search(value) or any(
                _references(value, f"var.{name}") for name in sensitive_vars
            )
            if secret and block.body.get("sensitive") is not True:
                problems.append(f"{block.address}: exposes a secret value; set sensitive = true")
    return problems


def check_checkov_skips(root: Path) -> list[str]:
    """Every ``#checkov:skip`` names one check and gives a reason a reviewer can judge."""
    problems = []
    for path in tf_files(root):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            match = SKIP_COMMENT.search(line)
            if not match:
                continue
            reason = (match.group("reason") or "").strip()
            if not CHECK_ID.match(match.group("id")):
                problems.append(f"{path}:{number}: skip of {match.group('id')!r} is not one checkov check id")
            if len(reason) < MIN_SKIP_REASON:
                problems.append(
                    f"{path}:{number}: skip of {match.group('id')} lacks a reason (#checkov:skip=ID:why)"
                )
    return problems


def check_s3_buckets(root: Path) -> list[str]:
    """Each bucket is private (public access block, no public ACL), versioned, encrypted, TLS-only."""
    problems = []
    for directory in tf_dirs(root):
        resources = blocks_in_dir(directory, "resource")
        by_type: dict[str, list[Block]] = {}
        for block in resources:
            by_type.setdefault(block.labels[0], []).append(block)
        for block in by_type.get("aws_s3_bucket_public_access_block", []):
            lax = [flag for flag in PUBLIC_ACCESS_FLAGS if block.body.get(flag) is not True]
            if lax:
                problems.append(f"{block.address}: {', '.join(lax)} must be true")
        for block in by_type.get("aws_s3_bucket_acl", []) + by_type.get("aws_s3_bucket", []):
            if block.body.get("acl") in PUBLIC_ACLS:
                problems.append(f"{block.address}: acl = {block.body['acl']!r} makes objects public")
        text = "\n".join(p.read_text(encoding="utf-8") for p in directory.glob("*.tf"))
        for bucket in by_type.get("aws_s3_bucket", []):
            address = f"aws_s3_bucket.{bucket.labels[1]}"
            for companion, what in (
                ("aws_s3_bucket_public_access_block", "a public access block"),
                ("aws_s3_bucket_versioning", "versioning"),
                ("aws_s3_bucket_server_side_encryption_configuration", "default encryption"),
                ("aws_s3_bucket_policy", "a bucket policy"),
            ):
                if not any(_references(b.body.get("bucket"), address) for b in by_type.get(companion, [])):
                    problems.append(f"{bucket.address}: no {companion} references it ({what} is required)")
            if "aws:SecureTransport" not in text:
                problems.append(
                    f"{bucket.address}: no policy in {directory} denies aws:SecureTransport = false"
                )
    return problems


def conf_placeholders(conf_path: Path) -> set[str]:
    """Names of the ``${terraform:NAME}`` placeholders among the values of a conf file."""

    def values(node: Any) -> Iterator[Any]:
        if isinstance(node, dict):
            for value in node.values():
                yield from values(value)
        elif isinstance(node, list):
            for value in node:
                yield from values(value)
        else:
            yield node

    data = yaml.safe_load(conf_path.read_text(encoding="utf-8"))
    return {m for v in values(data) if isinstance(v, str) for m in PLACEHOLDER.findall(v)}


def output_names(env_dir: Path) -> Counter[str]:
    """How many times each output name is declared in a root module."""
    return Counter(block.labels[0] for block in blocks_in_dir(env_dir, "output"))


def check_placeholders(conf_path: Path, env_dir: Path) -> list[str]:
    """Every placeholder in the conf file is produced by exactly one output of the root."""
    wanted = conf_placeholders(conf_path)
    if not wanted:
        return [f"{conf_path}: no ${{terraform:NAME}} placeholders found"]
    have = output_names(env_dir)
    return [
        f"{env_dir}: {have[name]} outputs named {name!r} (placeholder in {conf_path.name}); "
        "expected exactly one"
        for name in sorted(wanted)
        if have[name] != 1
    ]


def all_problems(root: Path = TERRAFORM_ROOT, conf_path: Path = PROD_CONF) -> dict[str, list[str]]:
    """Every check over the real tree, keyed by check name."""
    environments = sorted(d for d in (root / "environments").iterdir() if d.is_dir())
    return {
        "parse": check_parse(root),
        "variables": check_variables(root),
        "module layout": check_module_layout(root / "modules"),
        "provider pins": check_provider_pins(root),
        "backend": [p for env in environments for p in check_backend(env)],
        "secret variables": check_secret_variables(root),
        "literal secrets": check_literal_secrets(root),
        "sensitive outputs": check_sensitive_outputs(root),
        "checkov skips": check_checkov_skips(root),
        "s3 buckets": check_s3_buckets(root),
        "placeholders": [p for env in environments for p in check_placeholders(conf_path, env)],
    }


# --------------------------------------------------------------------------- checkov


@dataclass(frozen=True)
class CheckovReport:
    """What one checkov run found: its exit code and the failed (check id, resource) pairs."""

    returncode: int
    failed: list[tuple[str, str]]
    output: str

    @property
    def failed_ids(self) -> set[str]:
        """Ids of the checks that failed."""
        return {check_id for check_id, _ in self.failed}


def checkov_binary() -> Path:
    """checkov in its own virtualenv: $KAPPA_CHECKOV, else <repo>/.venv-checkov/bin/checkov."""
    return Path(os.environ.get("KAPPA_CHECKOV") or REPO / ".venv-checkov" / "bin" / "checkov")


def run_checkov(target: Path, checkov: Path, timeout_s: float = 240) -> CheckovReport:
    """Scan a directory offline: no Prisma Cloud download, no module download, no update check."""
    command = [
        str(checkov), "--directory", str(target), "--framework", "terraform",
        "--quiet", "--compact", "--skip-download", "--download-external-modules", "false",
        "--output", "json",
    ]
    env = {
        **os.environ,
        "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true",  # no PyPI version check
        "BC_SKIP_MAPPING": "TRUE",  # no Prisma Cloud check-id mapping download
        "LOG_LEVEL": "WARNING",
    }
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    try:
        data = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(
            f"checkov exited {done.returncode} without a JSON report; stderr:\n{done.stderr[-3000:]}"
        ) from None
    reports = data if isinstance(data, list) else [data]
    failed = [
        (check["check_id"], check["resource"])
        for report in reports
        for check in report.get("results", {}).get("failed_checks", [])
    ]
    return CheckovReport(done.returncode, failed, done.stdout)


def main(argv: list[str] | None = None) -> int:
    """Print every problem in the tree; exit 1 when there is any."""
    root = Path(argv[0]) if argv else TERRAFORM_ROOT
    problems = {name: found for name, found in all_problems(root).items() if found}
    for name, found in problems.items():
        for line in found:
            print(f"{name}: {line}")
    print("no problems" if not problems else f"{sum(map(len, problems.values()))} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
