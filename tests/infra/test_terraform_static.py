"""Static checks of infra/terraform: HCL parses, house style, no secrets in code, private buckets,
least-privilege policies and Kafka ACLs, conf/prod.yaml placeholders covered, checkov clean; and
the same checks fail on a deliberately broken copy. Neither terraform nor its providers are needed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.infra.tf_checks import (
    PROD_CONF,
    TERRAFORM_ROOT,
    allow_everyone_if_no_acl_found,
    blocks_in_dir,
    check_acl_default,
    check_backend,
    check_checkov_skips,
    check_kafka_acls,
    check_literal_secrets,
    check_module_calls,
    check_module_layout,
    check_open_ingress,
    check_parse,
    check_placeholders,
    check_provider_pins,
    check_references,
    check_s3_buckets,
    check_secret_values,
    check_secret_variables,
    check_sensitive_outputs,
    check_variables,
    checkov_binary,
    conf_placeholders,
    is_composition_module,
    kafka_acl_grants,
    module_calls,
    output_names,
    resolve,
    run_checkov,
    tf_files,
    variable_default,
)

pytestmark = pytest.mark.infra

MODULES = TERRAFORM_ROOT / "modules"
ENVIRONMENTS = ("prod", "staging")
ACL_ROOTS = ("prod-acls", "staging-acls")  # the Kafka ACLs of each, applied from inside the VPC
# Each root is one call of its composition module, under this label.
COMPOSITIONS = {"platform": ("platform", ENVIRONMENTS), "platform-acls": ("platform_acls", ACL_ROOTS)}
COMPONENTS = {"network", "kafka", "kafka-acls", "spark", "redis", "lake", "airflow", "kms"}
EXPECTED_MODULES = COMPONENTS | set(COMPOSITIONS)
# The only actions granted on Resource "*": AWS offers no resource-level scoping for them.
UNSCOPABLE_ACTIONS = {"s3:GetAccountPublicAccessBlock", "cloudwatch:PutMetricData"}
# kafka-cluster actions on the cluster itself; every other one must name topics, groups or ids.
CLUSTER_ACTIONS = {
    "kafka-cluster:Connect", "kafka-cluster:DescribeCluster", "kafka-cluster:WriteDataIdempotently",
}


# What each SCRAM user may do on the brokers, written out by hand (the least-privilege
# table): (operation, resource type, pattern type, name).
PLATFORM_TOPICS = (
    "rsvps.raw", "rsvps.analyzed", "rsvps.summaries", "rsvps.dlq", "platform.metrics", "platform.errors",
)
IDEMPOTENT_PRODUCER = {("IdempotentWrite", "Cluster", "Literal", "kafka-cluster")}


def topic_acls(operations: str, *topics: str) -> set[tuple[str, str, str, str]]:
    return {(operation, "Topic", "Literal", topic) for operation in operations.split() for topic in topics}


def group_acls(operation: str, prefix: str) -> set[tuple[str, str, str, str]]:
    return {(operation, "Group", "Prefixed", prefix)}


EXPECTED_ACLS = {
    "collector": topic_acls("Write Describe", "rsvps.raw", "rsvps.dlq") | IDEMPOTENT_PRODUCER,
    "streaming": (
        topic_acls("Read Describe", "rsvps.raw")
        | topic_acls(
            "Write Describe",
            "rsvps.analyzed", "rsvps.summaries", "rsvps.dlq", "platform.metrics", "platform.errors",
        )
        | group_acls("Read", "kappa-streaming")
        | IDEMPOTENT_PRODUCER
    ),
    "loader": (
        topic_acls("Read Describe", *PLATFORM_TOPICS)
        | topic_acls("Write", "platform.metrics", "platform.errors")
        | group_acls("Read", "kappa-loader")
        | IDEMPOTENT_PRODUCER
    ),
    "airflow": topic_acls("Describe", *PLATFORM_TOPICS) | group_acls("Describe", "kappa-"),
    "operator": topic_acls("Create Alter AlterConfigs DescribeConfigs Describe", *PLATFORM_TOPICS),
}
WILDCARD_ACL = """
resource "kafka_acl" "everything" {
  resource_name       = "*"
  resource_type       = "Topic"
  acl_principal       = "User:collector"
  acl_host            = "*"
  acl_operation       = "All"
  acl_permission_type = "Allow"
}
"""


def remove_block(text: str, header: str) -> str:
    """Text without the block that starts with header (up to its matching closing brace)."""
    start = text.index(header)
    depth, index = 0, text.index("{", start)
    while True:
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        index += 1
        if depth == 0:
            return text[:start] + text[index:]


def policy_statements(module: str, document: str) -> list[dict]:
    """Statements of data.aws_iam_policy_document.<document> in a module (dynamic ones included)."""
    wanted = ("aws_iam_policy_document", document)
    docs = [b for b in blocks_in_dir(MODULES / module, "data") if b.labels == wanted]
    assert len(docs) == 1, f"{module}: expected one policy document {document!r}"
    dynamic = [entry[name]["content"][0] for entry in docs[0].body.get("dynamic", []) for name in entry]
    return docs[0].body.get("statement", []) + dynamic


@pytest.fixture(scope="module")
def checkov() -> Path:
    path = checkov_binary()
    if not path.is_file():
        pytest.fail(
            f"checkov not found at {path}: run `make setup` (it builds .venv-checkov from "
            "requirements/checkov-lock.txt) or point KAPPA_CHECKOV at a checkov executable"
        )
    return path


@pytest.fixture
def broken_lake(tmp_path: Path) -> Path:
    """A copy of the lake module with an untyped variable, a public ACL and no public access
    block, versioning or default encryption."""
    shutil.copytree(MODULES / "lake", tmp_path / "modules" / "lake")
    shutil.copytree(MODULES / "kms", tmp_path / "modules" / "kms")
    lake = tmp_path / "modules" / "lake"
    variables = lake / "variables.tf"
    variables.write_text(variables.read_text() + '\nvariable "owner" {\n  description = "Who owns it."\n}\n')
    main = lake / "main.tf"
    text = main.read_text()
    for companion in ("public_access_block", "versioning", "server_side_encryption_configuration"):
        text = remove_block(text, f'resource "aws_s3_bucket_{companion}" "this"')
    text += (
        '\nresource "aws_s3_bucket_acl" "public" {\n  for_each = local.buckets\n\n'
        '  bucket = aws_s3_bucket.this[each.key].id\n  acl    = "public-read"\n}\n'
    )
    main.write_text(text)
    return lake


# --------------------------------------------------------------------------- the real tree


def test_every_tf_file_parses():
    files = tf_files(TERRAFORM_ROOT)
    assert {f.parent.name for f in files} >= EXPECTED_MODULES | set(ENVIRONMENTS) | set(ACL_ROOTS)
    assert check_parse(TERRAFORM_ROOT) == []


def test_every_variable_is_typed_and_described():
    assert check_variables(TERRAFORM_ROOT) == []


def test_modules_follow_the_house_layout():
    assert {d.name for d in MODULES.iterdir() if d.is_dir()} >= EXPECTED_MODULES
    assert check_module_layout(MODULES) == []
    # Only the composition modules go without a primary resource `this`.
    assert {d.name for d in MODULES.iterdir() if d.is_dir() and is_composition_module(d)} == set(COMPOSITIONS)


def test_module_calls_match_the_modules_they_call():
    assert check_module_calls(TERRAFORM_ROOT) == []


def test_providers_are_pinned_and_state_is_remote_encrypted_and_locked():
    assert check_provider_pins(TERRAFORM_ROOT) == []
    for env in ENVIRONMENTS + ACL_ROOTS:
        assert check_backend(TERRAFORM_ROOT / "environments" / env) == []


def test_no_secret_lives_in_code():
    assert check_secret_variables(TERRAFORM_ROOT) == []
    assert check_literal_secrets(TERRAFORM_ROOT) == []
    assert check_sensitive_outputs(TERRAFORM_ROOT) == []


def test_checkov_skips_name_a_check_and_a_reason():
    assert check_checkov_skips(TERRAFORM_ROOT) == []


def test_buckets_are_private_versioned_encrypted_and_tls_only():
    assert check_s3_buckets(TERRAFORM_ROOT) == []


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_prod_placeholder_is_exactly_one_output(env):
    placeholders = conf_placeholders(PROD_CONF)
    assert len(placeholders) >= 12
    assert {"kafka_bootstrap_servers", "redis_auth_secret_arn", "lake_root"} <= placeholders
    assert check_placeholders(PROD_CONF, TERRAFORM_ROOT / "environments" / env) == []


def root_calls(env: str) -> list:
    return blocks_in_dir(TERRAFORM_ROOT / "environments" / env, "module")


def call_arguments(env: str) -> set[str]:
    """Names of the arguments a root passes its (single) composition module call."""
    (call,) = root_calls(env)
    return {name for name in call.body if not name.startswith("__")}


@pytest.mark.parametrize("composition", sorted(COMPOSITIONS))
def test_every_root_is_one_call_of_its_composition_module(composition):
    """The wiring lives in the composition module; a root configures providers, passes its
    environment's values and forwards the module's outputs under the same names."""
    label, roots = COMPOSITIONS[composition]
    module_outputs = output_names(MODULES / composition)
    for env in roots:
        root = TERRAFORM_ROOT / "environments" / env
        calls = root_calls(env)
        assert [(c.labels, c.body["source"]) for c in calls] == [((label,), f"../../modules/{composition}")]
        assert blocks_in_dir(root, "resource") == []
        assert [b.labels for b in blocks_in_dir(root, "data")] in ([], [("aws_msk_cluster", "this")])
        outputs = {b.labels[0]: b.body["value"] for b in blocks_in_dir(root, "output")}
        assert output_names(root) == module_outputs
        assert outputs == {name: f"${{module.{label}.{name}}}" for name in module_outputs}


def test_staging_and_prod_differ_in_values_not_in_what_they_set():
    """Both roots state the same knobs; the values that must differ do, and prod keeps its data."""
    assert call_arguments("prod") == call_arguments("staging")
    assert [b.labels for b in blocks_in_dir(TERRAFORM_ROOT / "environments" / "prod", "variable")] == [
        b.labels for b in blocks_in_dir(TERRAFORM_ROOT / "environments" / "staging", "variable")
    ]
    settings = {
        env: {name: call.argument(name) for name in ("environment", "vpc_cidr", "allow_destroy_with_data")}
        for env in ENVIRONMENTS
        for call in module_calls(TERRAFORM_ROOT / "environments" / env, "modules/platform")
    }
    assert settings["prod"]["environment"] == "prod" and settings["staging"]["environment"] == "staging"
    assert settings["prod"]["vpc_cidr"] != settings["staging"]["vpc_cidr"]
    assert settings["prod"]["allow_destroy_with_data"] is False
    prod_kafka = module_calls(TERRAFORM_ROOT / "environments" / "prod", "modules/kafka")[0]
    assert prod_kafka.argument("secret_recovery_window_days") == 30
    assert prod_kafka.argument("kms_deletion_window_days") == 30


@pytest.mark.parametrize(("env", "acls"), zip(ENVIRONMENTS, ACL_ROOTS, strict=True))
def test_acl_root_finds_the_cluster_its_platform_root_creates(env, acls):
    cluster = module_calls(TERRAFORM_ROOT / "environments" / env, "modules/kafka")[0].argument("name")
    assert cluster == f"kappa-{env}"
    acl_root = TERRAFORM_ROOT / "environments" / acls
    (lookup,) = blocks_in_dir(acl_root, "data")
    assert resolve(acl_root, lookup.body["cluster_name"]) == cluster


def test_kafka_is_tls_only_with_scram_from_a_cmk_encrypted_secret():
    resources = {b.labels: b.body for b in blocks_in_dir(MODULES / "kafka", "resource")}
    cluster = resources[("aws_msk_cluster", "this")]
    encryption = cluster["encryption_info"][0]
    assert encryption["encryption_in_transit"][0]["client_broker"] == "TLS"
    assert "module.kms.key_arn" in encryption["encryption_at_rest_kms_key_arn"]
    assert cluster["client_authentication"][0]["sasl"][0]["scram"] is True
    assert cluster["client_authentication"][0]["unauthenticated"] is False
    assert cluster["logging_info"][0]["broker_logs"][0]["cloudwatch_logs"][0]["enabled"] is True
    for name in ("random_password", "aws_secretsmanager_secret", "aws_secretsmanager_secret_version"):
        assert resources[(name, "scram")]["for_each"] == "${local.scram_users}", name
    secret = resources[("aws_secretsmanager_secret", "scram")]
    assert secret["name"].startswith("AmazonMSK_") and secret["name"].endswith("_${each.key}")
    assert "module.kms.key_arn" in secret["kms_key_id"]
    stored = resources[("aws_secretsmanager_secret_version", "scram")]["secret_string"]
    assert "username = each.key" in stored and "random_password.scram[each.key].result" in stored
    association = resources[("aws_msk_scram_secret_association", "this")]
    assert "aws_secretsmanager_secret.scram[user].arn" in str(association["secret_arn_list"])


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_each_workload_gets_its_own_scram_secret_and_only_its_own(env):
    (kafka,) = module_calls(TERRAFORM_ROOT / "environments" / env, "modules/kafka")
    assert sorted(kafka.argument("scram_users")) == sorted(EXPECTED_ACLS)
    assert kafka.argument("admin_scram_users") == ["operator"]
    platform = MODULES / "platform"
    outputs = {b.labels[0]: b.body["value"] for b in blocks_in_dir(platform, "output")}
    assert outputs["kafka_sasl_secret_arn"] == '${module.kafka.scram_secret_arns["streaming"]}'
    assert outputs["kafka_sasl_secret_arns"] == "${module.kafka.scram_secret_arns}"
    wiring = {b.labels[0]: b.body for b in blocks_in_dir(platform, "module")}
    local_values = {k: v for b in blocks_in_dir(platform, "locals") for k, v in b.body.items()}
    assert local_values["kafka_spark_users"] == ["streaming", "loader"]
    assert "local.kafka_spark_users" in wiring["spark"]["secret_arns"]
    assert local_values["kafka_airflow_user"] == "airflow"
    assert "scram_secret_arns[local.kafka_airflow_user]" in wiring["airflow"]["kafka_secret_arn"]


@pytest.mark.parametrize("env", ACL_ROOTS)
def test_each_workload_is_granted_only_its_topics_and_groups(env):
    grants, problems = kafka_acl_grants(TERRAFORM_ROOT / "environments" / env)
    assert problems == []
    assert grants == EXPECTED_ACLS
    for user, acls in grants.items():
        for operation, kind, pattern, name in acls:
            assert "*" not in name and operation != "All", (user, operation, kind, name)
            assert kind == "Group" or pattern == "Literal", (user, operation, kind, name)


def test_kafka_acls_name_their_resources_and_operations():
    assert check_kafka_acls(TERRAFORM_ROOT) == []


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_brokers_deny_what_no_acl_grants(env):
    assert variable_default(MODULES / "kafka", "allow_everyone_if_no_acl_found") is False
    assert allow_everyone_if_no_acl_found(TERRAFORM_ROOT / "environments" / env) == [False]
    assert check_acl_default(TERRAFORM_ROOT / "environments" / env) == []


def test_redis_encrypts_and_takes_its_token_from_a_generated_secret():
    resources = {b.labels: b.body for b in blocks_in_dir(MODULES / "redis", "resource")}
    group = resources[("aws_elasticache_replication_group", "this")]
    assert group["transit_encryption_enabled"] is True
    assert group["at_rest_encryption_enabled"] is True
    assert "random_password.auth.result" in group["auth_token"]
    stored = resources[("aws_secretsmanager_secret_version", "auth")]["secret_string"]
    assert "random_password.auth.result" in stored


@pytest.mark.parametrize(("module", "document"), [("spark", "job"), ("airflow", "execution")])
def test_role_policies_name_their_resources(module, document):
    statements = policy_statements(module, document)
    assert len(statements) >= 5
    for statement in statements:
        actions = set(statement["actions"])
        resources = statement.get("resources", statement.get("not_resources"))
        assert resources, statement
        assert not any(action == "*" or action.endswith(":*") for action in actions), statement
        if "*" in resources:
            assert actions <= UNSCOPABLE_ACTIONS, statement
        kafka = {action for action in actions if action.startswith("kafka-cluster:")}
        if kafka & CLUSTER_ACTIONS:
            assert kafka <= CLUSTER_ACTIONS and "cluster_arn" in str(resources), statement
        elif kafka:
            assert re.search(r"topic|group|transactional", str(resources)), statement


def test_checkov_passes_with_only_commented_skips(checkov):
    report = run_checkov(TERRAFORM_ROOT, checkov)
    failed = "\n".join(f"{check} {resource}" for check, resource in report.failed)
    assert report.failed == [], f"checkov failed checks:\n{failed}"
    assert report.returncode == 0


# --------------------------------------------------------------------------- a broken copy


def test_checks_catch_an_untyped_variable(broken_lake):
    problems = check_variables(broken_lake)
    assert len(problems) == 1
    assert "variable.owner" in problems[0] and "no type" in problems[0]


def test_checks_catch_a_bucket_that_allows_plain_http(broken_lake):
    assert check_s3_buckets(MODULES / "lake") == []
    main = broken_lake / "main.tf"
    main.write_text(main.read_text().replace("aws:SecureTransport", "aws:SourceVpce"))
    problems = check_s3_buckets(broken_lake)
    assert len(problems) == 2, problems
    assert "resource.aws_s3_bucket.this" in problems[0] and "aws:SecureTransport" in problems[0]


def test_checkov_fails_on_a_public_unversioned_unencrypted_bucket(broken_lake, checkov):
    """What tf_checks leaves to checkov: public access, versioning, default encryption."""
    report = run_checkov(broken_lake, checkov)
    assert report.returncode != 0
    assert {"CKV2_AWS_6", "CKV_AWS_20", "CKV_AWS_21", "CKV_AWS_145"} <= report.failed_ids, report.failed


def copy_tree(tmp_path: Path, *parts: str) -> Path:
    """Copies of modules and roots (``modules/kafka``, ``environments/prod``) in the same layout."""
    for part in parts:
        shutil.copytree(TERRAFORM_ROOT / part, tmp_path / part)
    return tmp_path


@pytest.fixture
def acls_copy(tmp_path: Path) -> Path:
    """A copy of the kafka-acls and platform-acls modules and the prod ACL root."""
    return copy_tree(tmp_path, "modules/kafka-acls", "modules/platform-acls", "environments/prod-acls")


def test_checks_catch_a_wildcard_acl(acls_copy):
    assert check_kafka_acls(acls_copy) == []
    main = acls_copy / "modules" / "kafka-acls" / "main.tf"
    main.write_text(main.read_text() + WILDCARD_ACL)
    problems = check_kafka_acls(acls_copy)
    assert len(problems) == 3, problems
    assert "kafka_acl.everything" in problems[0] and "resource_name '*' is a wildcard" in problems[0]
    assert "kafka_acl.everything" in problems[1] and "grants 'All' on a Topic" in problems[1]
    assert "main.tf" in problems[2] and "'All' must never be granted" in problems[2]


def test_checks_catch_a_wildcard_topic_or_group_grant(acls_copy):
    variables = acls_copy / "modules" / "platform-acls" / "variables.tf"
    text = variables.read_text()
    text = text.replace('consume = ["rsvps.raw"]', 'consume = ["rsvps.raw", "*"]', 1)
    text = text.replace('consume = ["kappa-loader"]', 'consume = ["*"]', 1)
    variables.write_text(text)
    problems = check_kafka_acls(acls_copy)
    assert len(problems) == 2, problems
    assert "streaming: Topic name '*' is a wildcard" in problems[0]
    assert "loader: Group name '*' is a wildcard" in problems[1]
    grants, _ = kafka_acl_grants(acls_copy / "environments" / "prod-acls")
    assert ("Read", "Topic", "Literal", "*") in grants["streaming"]


def test_checks_catch_all_hidden_in_the_operation_table(acls_copy):
    main = acls_copy / "modules" / "kafka-acls" / "main.tf"
    text = main.read_text().replace('produce  = ["Write", "Describe"]', 'produce  = ["All"]', 1)
    main.write_text(text)
    problems = check_kafka_acls(acls_copy)
    assert any("kafka_acl.this" in p and "grants 'All' on a Topic" in p for p in problems), problems
    assert any("'All' must never be granted" in p for p in problems), problems


def replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_checks_catch_brokers_that_allow_everyone(tmp_path):
    copy_tree(tmp_path, "modules/kafka", "modules/platform", "environments/prod")
    root, platform = tmp_path / "environments" / "prod", tmp_path / "modules" / "platform"
    assert check_acl_default(root) == []
    # The root turns it on (the migration switch), through the composition module.
    call = '  source = "../../modules/platform"\n'
    replace_once(root / "main.tf", call, call + "  kafka_allow_everyone_if_no_acl_found = var.open\n")
    (root / "open.tf").write_text('variable "open" {\n  type = bool\n  default = true\n}\n')
    assert allow_everyone_if_no_acl_found(root) == [True]
    assert "resolves to [True]" in check_acl_default(root)[0]
    (root / "open.tf").unlink()
    replace_once(root / "main.tf", "  kafka_allow_everyone_if_no_acl_found = var.open\n", "")
    assert check_acl_default(root) == []
    # The composition module's default.
    default = 'variable "kafka_allow_everyone_if_no_acl_found" {'
    text = (platform / "variables.tf").read_text()
    start = text.index(default)
    (platform / "variables.tf").write_text(
        text[:start] + text[start:].replace("default     = false", "default     = true", 1)
    )
    assert allow_everyone_if_no_acl_found(root) == [True]
    # The composition module stops passing it: the kafka module's default (false) applies again.
    argument = "  allow_everyone_if_no_acl_found = var.kafka_allow_everyone_if_no_acl_found\n"
    replace_once(platform / "main.tf", argument, "")
    assert check_acl_default(root) == []
    # A server_properties override wins.
    override = '  server_properties = { "allow.everyone.if.no.acl.found" = "true" }\n'
    replace_once(platform / "main.tf", "  scram_users ", override + "  scram_users ")
    assert allow_everyone_if_no_acl_found(root) == [True]


def test_checks_catch_a_missing_or_doubled_output(tmp_path):
    env = tmp_path / "env"
    env.mkdir()
    outputs = (TERRAFORM_ROOT / "environments" / "prod" / "outputs.tf").read_text()
    outputs = remove_block(outputs, 'output "redis_port"')
    outputs += '\noutput "lake_root" {\n  description = "Again."\n  value       = "s3://x/delta"\n}\n'
    (env / "outputs.tf").write_text(outputs)
    problems = check_placeholders(PROD_CONF, env)
    assert len(problems) == 2
    assert "0 outputs named 'redis_port'" in problems[1] and "2 outputs named 'lake_root'" in problems[0]


def test_checks_catch_a_broken_layout_and_unparsable_hcl(tmp_path):
    module = tmp_path / "modules" / "cache"
    module.mkdir(parents=True)
    (module / "main.tf").write_text('resource "aws_sqs_queue" "main" {\n  name = "q"\n}\n')
    (module / "variables.tf").write_text('variable "name" {\n  type = string\n')
    problems = check_module_layout(tmp_path / "modules")
    assert len(problems) == 3
    assert "missing outputs.tf, versions.tf" in problems[0]
    assert "variables.tf: not valid HCL2" in problems[1]
    assert "no resource named 'this'" in problems[2]
    assert [p for p in check_parse(tmp_path) if "variables.tf: not valid HCL2" in p]


def test_only_a_module_that_just_calls_siblings_goes_without_this(tmp_path):
    copy_tree(tmp_path, "modules/platform", "modules/platform-acls")
    modules = tmp_path / "modules"
    assert check_module_layout(modules) == []
    # A resource (or data source) in a composition module makes it a component module.
    main = modules / "platform" / "main.tf"
    main.write_text(main.read_text() + '\ndata "aws_region" "current" {}\n')
    # A module from elsewhere is not a sibling: the wiring would not be the platform's own.
    acls = modules / "platform-acls" / "main.tf"
    acls.write_text(acls.read_text().replace('"../kafka-acls"', '"git::https://example.com/kafka-acls.git"'))
    problems = check_module_layout(modules)
    assert len(problems) == 2, problems
    assert all("no resource named 'this'" in p for p in problems)
    assert "platform:" in problems[0] and "platform-acls:" in problems[1]


def test_checks_catch_a_call_that_terraform_would_reject(tmp_path):
    copy_tree(tmp_path, "modules/platform", "environments/prod")
    root = tmp_path / "environments" / "prod"
    replace_once(root / "main.tf", "  redis_node_type ", "  redis_nodetype ")
    replace_once(root / "outputs.tf", "module.platform.redis_port", "module.platform.redis_ports")
    problems = check_module_calls(tmp_path / "environments")  # the copy has no component modules
    assert len(problems) == 3, problems
    assert "passes 'redis_nodetype', which platform does not declare" in problems[0]
    assert "does not pass 'redis_node_type', which platform requires" in problems[1]
    assert "reads module.platform.redis_ports, which platform does not output" in problems[2]


def test_checks_catch_a_sensitive_output_forwarded_unmarked(tmp_path):
    copy_tree(tmp_path, "modules/platform", "environments/prod")
    assert check_sensitive_outputs(tmp_path / "environments") == []
    replace_once(
        tmp_path / "modules" / "platform" / "outputs.tf",
        "  value       = module.redis.port\n",
        "  value       = module.redis.port\n  sensitive   = true\n",
    )
    problems = check_sensitive_outputs(tmp_path)
    assert len(problems) == 1 and "output.redis_port" in problems[0] and "environments/prod" in problems[0]
    replace_once(
        tmp_path / "environments" / "prod" / "outputs.tf",
        "  value       = module.platform.redis_port\n",
        "  value       = module.platform.redis_port\n  sensitive   = true\n",
    )
    assert check_sensitive_outputs(tmp_path) == []


def test_checks_catch_secrets_in_code(tmp_path):
    (tmp_path / "main.tf").write_text(
        'variable "db_password" {\n  type        = string\n  description = "Password."\n'
        '  default     = "x"\n}\n\n'
        'resource "random_password" "token" {\n  length = 32\n}\n\n'
        'resource "aws_elasticache_replication_group" "this" {\n'
        '  auth_token = "correct-horse-battery-staple"\n'
        "  #checkov:skip=CKV_AWS_31\n}\n\n"
        'output "token" {\n  description = "The token."\n  value       = random_password.token.result\n}\n'
    )
    variable_problems = check_secret_variables(tmp_path)
    assert any("must have no default" in p for p in variable_problems)
    assert any("sensitive = true" in p for p in variable_problems)
    assert len(check_literal_secrets(tmp_path)) == 1
    assert "output.token" in check_sensitive_outputs(tmp_path)[0]
    assert "lacks a reason" in check_checkov_skips(tmp_path)[0]


# Issue 18 item 14: mistakes planted by an outside check that nothing caught before.
OPEN_KAFKA_RULES = {
    "aws_security_group_rule": (
        'resource "aws_security_group_rule" "kafka_world" {\n  type              = "ingress"\n'
        '  security_group_id = aws_security_group.kafka.id\n  cidr_blocks       = ["0.0.0.0/0"]\n'
        '  protocol          = "tcp"\n  from_port         = 9092\n  to_port           = 9098\n}\n'),
    "aws_vpc_security_group_ingress_rule": (
        'resource "aws_vpc_security_group_ingress_rule" "kafka_world" {\n'
        '  security_group_id = aws_security_group.kafka.id\n  cidr_ipv4         = "0.0.0.0/0"\n'
        '  ip_protocol       = "tcp"\n  from_port         = 9096\n  to_port           = 9096\n}\n'),
    "inline": (
        'resource "aws_security_group" "kafka_world" {\n  name   = "world"\n'
        '  vpc_id = aws_vpc.this.id\n\n  ingress {\n    from_port        = 9094\n'
        '    to_port          = 9094\n    protocol         = "tcp"\n'
        '    ipv6_cidr_blocks = ["::/0"]\n  }\n}\n'),
}


@pytest.mark.parametrize("kind", sorted(OPEN_KAFKA_RULES))
def test_checks_catch_kafka_ports_open_to_the_internet(tmp_path, kind):
    network = copy_tree(tmp_path, "modules/network") / "modules" / "network"
    assert check_open_ingress(network) == []
    main = network / "main.tf"
    main.write_text(main.read_text() + "\n" + OPEN_KAFKA_RULES[kind])
    problems = check_open_ingress(network)
    assert len(problems) == 1, problems
    assert "kafka_world" in problems[0] and "is open to the internet" in problems[0]
    assert {"aws_security_group_rule": "9092-9098", "inline": "9094-9094"}.get(
        kind, "9096-9096") in problems[0]


def test_checks_catch_an_undeclared_variable_or_local(tmp_path):
    redis = copy_tree(tmp_path, "modules/redis") / "modules" / "redis"
    assert check_references(redis) == []
    outputs = redis / "outputs.tf"
    outputs.write_text(outputs.read_text() + (
        '\noutput "x" {\n  description = "Planted."\n  value       = var.x\n}\n'
        '\noutput "y" {\n  description = "Planted."\n  value       = local.y\n}\n'))
    problems = check_references(redis)
    assert len(problems) == 2, problems
    assert "var.x is used but no variable 'x' is declared" in problems[1]
    assert "local.y is used but no local 'y' is declared" in problems[0]


def test_checks_catch_a_secret_held_under_an_innocent_name(tmp_path):
    lake = copy_tree(tmp_path, "modules/lake") / "modules" / "lake"
    assert check_secret_values(lake) == []
    (lake / "planted.tf").write_text(
        'locals {\n  broker_conn = "kJ8vQ2xLp9ZrT4mW7nB3cY6dF1gH5sA0"\n'
        '  catalog_url = "postgres://admin:hunter2@db.internal:5432/catalog"\n}\n\n'
        'variable "admin_credential" {\n  type        = string\n  description = "Planted."\n'
        '  default     = "Xk9PqL2mZ8vR4tW6yB1nC3dF5gH7jK0s"\n}\n')
    problems = check_secret_values(lake)
    assert len(problems) == 3, problems
    assert "local.broker_conn holds a literal that looks like a secret" in problems[0]
    assert "local.catalog_url holds a literal that looks like a secret" in problems[1]
    assert "variable.admin_credential" in problems[2]
    assert check_secret_variables(lake) == [], "the name-based check cannot see these"
