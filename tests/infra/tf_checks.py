"""Static checks of infra/terraform that need neither terraform nor its providers.

Each ``check_*`` function takes a directory and returns a list of problems, one readable line
each (empty: all good), so the tests can run them on the real tree and on a deliberately broken
copy. ``run_checkov`` runs checkov offline from its own virtualenv. From a shell:
``python -m tests.infra.tf_checks`` prints every problem in the real tree.
"""

from __future__ import annotations

import functools
import json
import math
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
# The layout rule for modules/<name>: every module has the four MODULE_FILES and is one of two
# kinds. A component module creates infrastructure and names its primary resource `this`. A
# composition module (modules/platform, modules/platform-acls) wires component modules together
# and owns nothing: it declares no `resource` and no `data` block, and at least one `module` call,
# each of a sibling module (source "../<name>"). It has no primary resource, so `this` is not
# asked of it; any resource or data source makes it a component module again.
COMPOSITION_SOURCE = re.compile(r"^\.\./[A-Za-z0-9_-]+/?$")
# Arguments of a module block that are not input variables of the module.
MODULE_META_ARGUMENTS = frozenset({"source", "version", "count", "for_each", "providers", "depends_on"})
MAX_MODULE_DEPTH = 8

PLACEHOLDER = re.compile(r"\$\{terraform:([A-Za-z0-9_]+)\}")
SKIP_COMMENT = re.compile(r"#\s*checkov:skip=(?P<id>[^:\s]*)(?::(?P<reason>.*))?")
CHECK_ID = re.compile(r"^CKV2?_[A-Z0-9]+_\d+$")
MIN_SKIP_REASON = 20
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
# Resource type prefixes that need no provider in required_providers (terraform_data, ...).
BUILTIN_PROVIDERS = frozenset({"terraform"})
# Kafka ACLs (Mongey/kafka kafka_acl): what may be granted on each resource type, with which
# pattern types. Never All, Any, Delete or ClusterAction; topics only by exact name.
KAFKA_MODULE, KAFKA_ACLS_MODULE = "modules/kafka", "modules/kafka-acls"
ACL_OPERATIONS = {
    "Topic": frozenset({"Read", "Write", "Describe", "Create", "Alter", "AlterConfigs", "DescribeConfigs"}),
    "Group": frozenset({"Read", "Describe"}),
    "Cluster": frozenset({"IdempotentWrite"}),
}
ACL_PATTERNS = {"Topic": {"Literal"}, "Group": {"Literal", "Prefixed"}, "Cluster": {"Literal"}}
# Where the module keeps the operations each access kind stands for, per resource type.
ACL_OPERATION_LOCALS = {"Topic": "topic_operations", "Group": "group_operations"}
NEVER_GRANTED = re.compile(r'"(All|Any|Unknown|Delete|ClusterAction)"')
MIN_GROUP_PREFIX = 4
ALLOW_EVERYONE = "allow_everyone_if_no_acl_found"

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
    unlabelled = {"terraform", "locals", "moved", "removed", "import"}
    return 0 if kind in unlabelled else {"resource": 2, "data": 2}.get(kind, 1)


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


def _is_composition(blocks: list[Block]) -> bool:
    kinds = {block.kind for block in blocks}
    calls = [block for block in blocks if block.kind == "module"]
    return (
        not kinds & {"resource", "data"}
        and bool(calls)
        and all(COMPOSITION_SOURCE.match(str(block.body.get("source", ""))) for block in calls)
    )


def is_composition_module(module: Path) -> bool:
    """A module that only calls sibling modules: no resource or data block, one module call or more,
    every one with a ``../<name>`` source (the rule above COMPOSITION_SOURCE)."""
    return _is_composition(blocks_in_dir(module))


def check_module_layout(modules_dir: Path) -> list[str]:
    """Each module has main/variables/outputs/versions.tf, and a primary resource named ``this``
    unless it is a composition module (only calls of sibling modules)."""
    problems = []
    modules = sorted(d for d in modules_dir.iterdir() if d.is_dir())
    if not modules:
        return [f"{modules_dir}: no modules found"]
    for module in modules:
        missing = [name for name in MODULE_FILES if not (module / name).is_file()]
        if missing:
            layout = ", ".join(MODULE_FILES)
            problems.append(f"{module}: missing {', '.join(missing)} (house layout is {layout})")
        blocks = []
        for path in sorted(module.glob("*.tf")):
            try:
                blocks += blocks_in_file(path)
            except TerraformParseError as exc:
                problems.append(str(exc))
        named_this = any(b.kind == "resource" and b.labels[1] == PRIMARY_RESOURCE for b in blocks)
        if not named_this and not _is_composition(blocks):
            problems.append(
                f"{module}: no resource named {PRIMARY_RESOURCE!r}; name the module's primary resource "
                "'this' (only a composition module, which calls sibling modules ../<name> and declares "
                "no resource or data source, has none)"
            )
        if (module / "versions.tf").is_file() and not blocks_in_file(module / "versions.tf", "terraform"):
            problems.append(f"{module / 'versions.tf'}: no terraform block pinning the providers")
    return problems


def used_providers(directory: Path) -> set[str]:
    """Local names of the providers a directory's resources, data sources and provider blocks use."""
    blocks = blocks_in_dir(directory, "resource") + blocks_in_dir(directory, "data")
    names = {b.labels[0].split("_")[0] for b in blocks}
    names |= {b.labels[0] for b in blocks_in_dir(directory, "provider")}
    return names - BUILTIN_PROVIDERS


def check_provider_pins(root: Path) -> list[str]:
    """Every versions.tf pins terraform and each provider it uses (source and version), alike everywhere."""
    problems = []
    pins: dict[str, dict[str, list[Path]]] = {}
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
        for name in sorted(used_providers(path.parent) - set(providers)):
            problems.append(f"{path}: the {name} provider is used but not in required_providers")
        for name, spec in providers.items():
            if not isinstance(spec, dict) or not spec.get("source") or not spec.get("version"):
                problems.append(f"{path}: provider {name} needs both source and version")
            else:
                by_version = pins.setdefault(f"{name} ({spec['source']})", {})
                by_version.setdefault(spec["version"], []).append(path)
    for provider, versions in sorted(pins.items()):
        if len(versions) > 1:
            problems.append(
                f"{provider} pinned differently: {', '.join(sorted(versions))}; use one constraint"
            )
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


SECRET_SHAPES = (
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key id
    re.compile(r"://[^/\s:@]+:[^/\s@]+@"),  # credentials in a URL
)
TOKEN_LIKE = re.compile(r"^[A-Za-z0-9+/=_!@#$%^&*~-]{20,}$")
MIN_TOKEN_ENTROPY = 3.5  # bits per character; names, ids and slugs stay well below


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def looks_secret(value: str) -> bool:
    """Whether a literal string looks like a credential, whatever it is named."""
    if "${" in value:
        return False
    if any(shape.search(value) for shape in SECRET_SHAPES):
        return True
    mixed = (any(c.isdigit() for c in value) and any(c.islower() for c in value)
             and any(c.isupper() for c in value))
    return bool(TOKEN_LIKE.match(value)) and mixed and _entropy(value) >= MIN_TOKEN_ENTROPY


def leaves(node: Any) -> Iterator[Any]:
    """Every scalar inside nested dicts and lists (parsed HCL or YAML)."""
    if isinstance(node, dict):
        for value in node.values():
            yield from leaves(value)
    elif isinstance(node, list):
        for value in node:
            yield from leaves(value)
    else:
        yield node


def check_secret_values(root: Path) -> list[str]:
    """No local or variable default holds a literal that looks like a credential (any name)."""
    problems = []
    for directory in tf_dirs(root):
        held = [(f"local.{name}", value) for name, value in _locals(directory).items()]
        held += [(b.address, b.body["default"]) for b in blocks_in_dir(directory, "variable")
                 if "default" in b.body]
        for where, value in held:
            if any(isinstance(text, str) and looks_secret(text) for text in leaves(value)):
                problems.append(f"{directory}: {where} holds a literal that looks like a secret; "
                                "generate it (random_password) or read it from Secrets Manager")
    return problems


def _sensitive_module_outputs(directory: Path) -> dict[str, set[str]]:
    """For each local module block in directory (by label), the outputs it marks sensitive."""
    found = {}
    for block in blocks_in_dir(directory, "module"):
        module = directory / str(block.body.get("source", ""))
        if _is_local_source(block.body.get("source")) and module.is_dir():
            found[block.labels[0]] = {
                b.labels[0] for b in blocks_in_dir(module, "output") if b.body.get("sensitive") is True
            }
    return found


def check_sensitive_outputs(root: Path) -> list[str]:
    """An output that exposes a secret value (not an ARN) is marked sensitive, and so is one that
    forwards a module's sensitive output (or the whole module), level after level up to the root."""
    problems = []
    for directory in tf_dirs(root):
        sensitive_vars = {
            b.labels[0] for b in blocks_in_dir(directory, "variable") if b.body.get("sensitive") is True
        }
        sensitive_modules = _sensitive_module_outputs(directory)
        for block in blocks_in_dir(directory, "output"):
            value = str(block.body.get("value", ""))
            secret = (
                SECRET_VALUE_REFERENCE.search(value)
                or any(_references(value, f"var.{name}") for name in sensitive_vars)
                or any(
                    _references(value, f"module.{label}.{name}")
                    or re.search(rf"\bmodule\.{re.escape(label)}\b(?![\w.-])", value)
                    for label, names in sensitive_modules.items()
                    for name in names
                )
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
    """Each bucket has a policy that denies plain HTTP (aws:SecureTransport = false).

    Public access blocks, public ACLs, versioning and default encryption are checkov's
    (CKV2_AWS_6, CKV_AWS_20, CKV_AWS_21, CKV_AWS_145); no checkov check covers TLS-only access.
    """
    problems = []
    for directory in tf_dirs(root):
        buckets = [b for b in blocks_in_dir(directory, "resource") if b.labels[0] == "aws_s3_bucket"]
        text = "\n".join(p.read_text(encoding="utf-8") for p in directory.glob("*.tf"))
        if buckets and "aws:SecureTransport" not in text:
            problems += [f"{bucket.address}: no policy in {directory} denies aws:SecureTransport = false"
                         for bucket in buckets]
    return problems


OPEN_CIDRS = frozenset({"0.0.0.0/0", "::/0"})


def _open_ingress(block: Block) -> list[dict[str, Any]]:
    """The ingress rules of a security group resource that admit the whole internet."""
    kind, body = block.labels[0], block.body
    if kind == "aws_security_group":
        rules = [rule for rule in body.get("ingress", []) if isinstance(rule, dict)]
    elif kind == "aws_security_group_rule" and body.get("type") == "ingress":
        rules = [body]
    elif kind == "aws_vpc_security_group_ingress_rule":
        rules = [{"cidr_blocks": [body.get("cidr_ipv4"), body.get("cidr_ipv6")], **body}]
    else:
        return []
    return [rule for rule in rules
            if OPEN_CIDRS & {*rule.get("cidr_blocks", []), *rule.get("ipv6_cidr_blocks", [])}]


def check_open_ingress(root: Path) -> list[str]:
    """No security group admits 0.0.0.0/0 or ::/0: inline, aws_security_group_rule or
    aws_vpc_security_group_ingress_rule (checkov checks only ports 22, 80, 3389 and all ports)."""
    return [
        f"{block.address}: ingress on ports {rule.get('from_port', '?')}-{rule.get('to_port', '?')} "
        "is open to the internet; name the client security group instead"
        for path in tf_files(root)
        for block in blocks_in_file(path, "resource")
        for rule in _open_ingress(block)
    ]


REFERENCE = re.compile(r"\b(var|local)\.([A-Za-z_][A-Za-z0-9_-]*)")
COMMENT = re.compile(r"(?m)(^|\s)(#|//).*$")


def check_references(root: Path) -> list[str]:
    """Every ``var.x`` and ``local.x`` names a variable or local declared in its module."""
    problems = []
    for directory in tf_dirs(root):
        declared = {
            "var": {b.labels[0] for b in blocks_in_dir(directory, "variable")},
            "local": set(_locals(directory)),
        }
        for path in sorted(directory.glob("*.tf")):
            text = COMMENT.sub("", path.read_text(encoding="utf-8"))
            for kind, name in sorted(set(REFERENCE.findall(text))):
                if name not in declared[kind]:
                    what = "variable" if kind == "var" else "local"
                    problems.append(f"{path}: {kind}.{name} is used but no {what} {name!r} is declared")
    return problems


def conf_placeholders(conf_path: Path) -> set[str]:
    """Names of the ``${terraform:NAME}`` placeholders among the values of a conf file."""
    data = yaml.safe_load(conf_path.read_text(encoding="utf-8"))
    return {m for v in leaves(data) if isinstance(v, str) for m in PLACEHOLDER.findall(v)}


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


# --------------------------------------------------------------------------- module calls


@dataclass(frozen=True, eq=False)
class Scope:
    """One module instance: its directory, the arguments its module block passes (None for a root),
    and the scope of that block, in which those arguments are evaluated."""

    directory: Path
    arguments: dict[str, Any] | None = None
    caller: Scope | None = None

    @property
    def depth(self) -> int:
        """How many module blocks lie between the root and this instance."""
        return 0 if self.caller is None else self.caller.depth + 1


@dataclass(frozen=True, eq=False)
class ModuleCall:
    """A ``module`` block, in the scope of the module or root that holds it."""

    block: Block
    caller: Scope

    @property
    def directory(self) -> Path:
        """The called module's directory (local sources only)."""
        return (self.caller.directory / str(self.block.body["source"])).resolve()

    @property
    def scope(self) -> Scope:
        """The called module as an instance: its ``var.NAME`` are this block's arguments."""
        return Scope(self.directory, self.block.body, self.caller)

    def argument(self, name: str) -> Any:
        """What the block passes for variable ``name`` (resolved), else the module's default."""
        if name in self.block.body:
            return resolve(self.caller, self.block.body[name])
        return variable_default(self.directory, name)


def _is_local_source(source: Any) -> bool:
    return isinstance(source, str) and source.startswith(("./", "../"))


def module_instances(directory: Path | Scope) -> list[ModuleCall]:
    """Every local module block reachable from a root (or module), through composition modules and
    component modules alike, outermost first."""
    scope = directory if isinstance(directory, Scope) else Scope(directory)
    found = []
    for block in blocks_in_dir(scope.directory, "module"):
        if not _is_local_source(block.body.get("source")):
            continue
        call = ModuleCall(block, scope)
        found.append(call)
        if call.directory.is_dir() and scope.depth < MAX_MODULE_DEPTH:
            found += module_instances(call.scope)
    return found


def module_calls(env_dir: Path, source_suffix: str) -> list[ModuleCall]:
    """The calls of modules/<name> (source_suffix "modules/<name>") that a root makes, itself or
    through the modules it calls."""
    return [
        call for call in module_instances(env_dir) if call.directory.as_posix().endswith(f"/{source_suffix}")
    ]


def roots_calling(root: Path, source_suffix: str) -> list[Path]:
    """The environments under root that call a module whose source ends with source_suffix."""
    environments = sorted(d for d in (root / "environments").iterdir() if d.is_dir())
    return [env for env in environments if module_calls(env, source_suffix)]


def variable_default(directory: Path, name: str) -> Any:
    """The default of variable ``name`` in directory (None when it has none)."""
    for block in blocks_in_dir(directory, "variable"):
        if block.labels[0] == name:
            return block.body.get("default")
    return None


SIMPLE_REFERENCE = re.compile(r"\$\{(var|local)\.(\w+)\}")


def _reference(scope: Scope, kind: str, name: str) -> Any:
    if kind == "local":
        return resolve(scope, _locals(scope.directory).get(name))
    if scope.arguments is not None and scope.caller is not None and name in scope.arguments:
        return resolve(scope.caller, scope.arguments[name])
    return variable_default(scope.directory, name)


def resolve(scope: Scope | Path, value: Any) -> Any:
    """A value as the static checks can know it: a literal as is; ``var.NAME`` as what the module's
    caller passes (evaluated in the caller's scope) or else the variable's default; ``local.NAME``
    as that local, resolved the same way; lists and maps item by item. A string that merely
    contains such references gets those with scalar values filled in; anything else (module
    outputs, functions) stays as written."""
    scope = scope if isinstance(scope, Scope) else Scope(scope)
    if isinstance(value, list):
        return [resolve(scope, item) for item in value]
    if isinstance(value, dict):
        return {key: resolve(scope, item) for key, item in value.items()}
    if not isinstance(value, str):
        return value
    whole = SIMPLE_REFERENCE.fullmatch(value)
    if whole:
        return _reference(scope, *whole.groups())

    def fill(match: re.Match[str]) -> str:
        found = _reference(scope, *match.groups())
        scalar = isinstance(found, (str, int, float)) and not isinstance(found, bool)
        return str(found) if scalar else match[0]

    return SIMPLE_REFERENCE.sub(fill, value)


MODULE_OUTPUT_REFERENCE = re.compile(r"\bmodule\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_]+)")


def check_module_calls(root: Path) -> list[str]:
    """What terraform validate would say of every local module call, without providers: the called
    module exists, every argument is one of its variables, every variable without a default is
    passed, and every ``module.<call>.<output>`` read next to the call is one of its outputs."""
    problems = []
    for directory in tf_dirs(root):
        calls = [b for b in blocks_in_dir(directory, "module") if _is_local_source(b.body.get("source"))]
        outputs_read = {
            match.groups()
            for block in blocks_in_dir(directory)
            if block.kind != "moved"
            for match in MODULE_OUTPUT_REFERENCE.finditer(json.dumps(block.body))
        }
        for block in calls:
            label, module = block.labels[0], (directory / str(block.body["source"])).resolve()
            if not list(module.glob("*.tf")):
                problems.append(f"{block.address}: source {block.body['source']!r} holds no module")
                continue
            variables = {b.labels[0]: b.body for b in blocks_in_dir(module, "variable")}
            arguments = {name for name in _entries(block.body) if name not in MODULE_META_ARGUMENTS}
            for name in sorted(arguments - set(variables)):
                problems.append(f"{block.address}: passes {name!r}, which {module.name} does not declare")
            required = {name for name, body in variables.items() if "default" not in body}
            for name in sorted(required - arguments):
                problems.append(f"{block.address}: does not pass {name!r}, which {module.name} requires")
            declared = {b.labels[0] for b in blocks_in_dir(module, "output")}
            for name in sorted(name for call, name in outputs_read if call == label and name not in declared):
                problems.append(
                    f"{directory}: reads module.{label}.{name}, which {module.name} does not output"
                )
    return problems


# --------------------------------------------------------------------------- Kafka ACLs

Grant = tuple[str, str, str, str]  # (operation, resource type, pattern type, resource name)


def _entries(mapping: Any) -> dict[str, Any]:
    """A parsed HCL map without python-hcl2's ``__is_block__``-style markers."""
    return {k: v for k, v in (mapping or {}).items() if not str(k).startswith("__")}


def _locals(directory: Path) -> dict[str, Any]:
    return {k: v for block in blocks_in_dir(directory, "locals") for k, v in _entries(block.body).items()}


def _acl_operations(block: Block, local_values: dict[str, Any]) -> set[str] | None:
    """The operations one kafka_acl may grant: its literal, or every entry of its operations table."""
    kind, operation = block.body.get("resource_type"), str(block.body.get("acl_operation", ""))
    if "${" not in operation:
        return {operation}
    table = ACL_OPERATION_LOCALS.get(kind)
    if table not in local_values:
        return None
    return {op for ops in _entries(local_values[table]).values() for op in ops}


def check_kafka_acl_resources(directory: Path) -> list[str]:
    """Each kafka_acl grants named operations on a named resource: no wildcard, no All."""
    problems = []
    local_values = _locals(directory)
    for block in (b for b in blocks_in_dir(directory, "resource") if b.labels[0] == "kafka_acl"):
        body, where, kind = block.body, block.address, block.body.get("resource_type")
        if kind not in ACL_OPERATIONS:
            problems.append(f"{where}: resource_type {kind!r}; grant only on {', '.join(ACL_OPERATIONS)}")
            continue
        if "*" in str(body.get("resource_name", "*")):
            problems.append(f"{where}: resource_name {body.get('resource_name')!r} is a wildcard; name it")
        pattern = body.get("resource_pattern_type_filter", "Literal")
        if pattern not in ACL_PATTERNS[kind]:
            problems.append(f"{where}: pattern {pattern!r} on a {kind}; use {sorted(ACL_PATTERNS[kind])}")
        if body.get("acl_permission_type") != "Allow":
            problems.append(f"{where}: acl_permission_type must be Allow")
        if not str(body.get("acl_principal", "")).startswith("User:"):
            problems.append(f"{where}: acl_principal must be User:<SCRAM user>")
        operations = _acl_operations(block, local_values)
        if operations is None:
            table = ACL_OPERATION_LOCALS.get(kind, "a literal")
            problems.append(f"{where}: acl_operation cannot be followed; take it from local.{table}")
            continue
        for bad in sorted(operations - ACL_OPERATIONS[kind]):
            problems.append(f"{where}: grants {bad!r} on a {kind}; only {sorted(ACL_OPERATIONS[kind])}")
    for path in sorted(directory.glob("*.tf")):
        text = path.read_text(encoding="utf-8")
        for match in NEVER_GRANTED.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            problems.append(f"{path}:{line}: Kafka operation {match.group(1)!r} must never be granted")
    return problems


def _name_problem(kind: str, name: str, topics: set[str]) -> str | None:
    if "*" in name or not name.strip():
        return f"{kind} name {name!r} is a wildcard; name the {kind.lower()}"
    if kind == "Topic" and name not in topics:
        return f"topic {name!r} is not one of the platform topics"
    if kind == "Group" and len(name) < MIN_GROUP_PREFIX:
        return f"group prefix {name!r} is too short to be the workload's own"
    return None


def kafka_acl_grants(env_dir: Path) -> tuple[dict[str, set[Grant]], list[str]]:
    """What a root's kafka-acls call (its own or a composition module's) grants each SCRAM user, from
    the arguments down the chain of calls and the module's own operation tables and resources; and
    the problems found on the way."""
    grants: dict[str, set[Grant]] = {}
    problems = []
    for call in module_calls(env_dir, KAFKA_ACLS_MODULE):
        tables = _locals(call.directory)
        acls = [b.body for b in blocks_in_dir(call.directory, "resource") if b.labels[0] == "kafka_acl"]
        patterns = {a.get("resource_type"): a.get("resource_pattern_type_filter", "Literal") for a in acls}
        topics = set(call.argument("topics") or [])
        for user, workload in _entries(call.argument("workloads")).items():
            granted = grants.setdefault(user, set())
            for kind, field in (("Topic", "topics"), ("Group", "groups")):
                operations = _entries(tables.get(ACL_OPERATION_LOCALS[kind]))
                for access, names in _entries(workload.get(field)).items():
                    if access not in operations:
                        problems.append(f"{env_dir}: {user}: unknown {field} access {access!r}")
                        continue
                    for name in names:
                        problem = _name_problem(kind, name, topics)
                        if problem:
                            problems.append(f"{env_dir}: {user}: {problem}")
                        granted |= {(op, kind, patterns.get(kind, "?"), name) for op in operations[access]}
            if workload.get("idempotent_producer", True) and _entries(workload.get("topics")).get("produce"):
                granted |= {
                    (acl["acl_operation"], "Cluster", "Literal", acl["resource_name"])
                    for acl in acls
                    if acl.get("resource_type") == "Cluster"
                }
    return grants, problems


def check_kafka_acls(root: Path) -> list[str]:
    """Every kafka_acl is tight, and every root grants its users named topics and groups only."""
    directories = sorted(
        {d for d in tf_dirs(root) for b in blocks_in_dir(d, "resource") if b.labels[0] == "kafka_acl"}
    )
    problems = [p for directory in directories for p in check_kafka_acl_resources(directory)]
    for env in roots_calling(root, KAFKA_ACLS_MODULE):
        problems += kafka_acl_grants(env)[1]
    return problems


def allow_everyone_if_no_acl_found(env_dir: Path) -> list[Any]:
    """What each kafka module call reachable from a root sets allow.everyone.if.no.acl.found to
    (followed through composition modules down to variable defaults); a server_properties
    override wins, as it does in the module."""
    values = []
    for call in module_calls(env_dir, KAFKA_MODULE):
        overrides = _entries(call.argument("server_properties"))
        if "allow.everyone.if.no.acl.found" in overrides:
            values.append(str(overrides["allow.everyone.if.no.acl.found"]).lower() == "true")
        else:
            values.append(call.argument(ALLOW_EVERYONE))
    return values


def check_acl_default(env_dir: Path) -> list[str]:
    """A root's brokers deny SCRAM users what no ACL grants: allow.everyone.if.no.acl.found is false."""
    values = allow_everyone_if_no_acl_found(env_dir)
    if values == [False]:
        return []
    return [
        f"{env_dir}: allow.everyone.if.no.acl.found resolves to {values!r} (one kafka module call, false "
        "expected): a missing Kafka ACL must deny"
    ]


def all_problems(root: Path = TERRAFORM_ROOT, conf_path: Path = PROD_CONF) -> dict[str, list[str]]:
    """Every check over the real tree, keyed by check name."""
    environments = sorted(d for d in (root / "environments").iterdir() if d.is_dir())
    platforms = roots_calling(root, KAFKA_MODULE)
    return {
        "parse": check_parse(root),
        "variables": check_variables(root),
        "module layout": check_module_layout(root / "modules"),
        "provider pins": check_provider_pins(root),
        "backend": [p for env in environments for p in check_backend(env)],
        "secret variables": check_secret_variables(root),
        "literal secrets": check_literal_secrets(root),
        "secret values": check_secret_values(root),
        "sensitive outputs": check_sensitive_outputs(root),
        "checkov skips": check_checkov_skips(root),
        "s3 buckets": check_s3_buckets(root),
        "open ingress": check_open_ingress(root),
        "references": check_references(root),
        "module calls": check_module_calls(root),
        "placeholders": [p for env in platforms for p in check_placeholders(conf_path, env)],
        "kafka acls": check_kafka_acls(root),
        "acl default": [p for env in platforms for p in check_acl_default(env)],
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
