"""Static checks of infra/terraform: HCL parses, house style, no secrets in code, private buckets,
least-privilege policies, conf/prod.yaml placeholders covered, checkov clean; and the same checks
fail on a deliberately broken copy. Neither terraform nor its providers are needed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.infra.tf_checks import (
    PROD_CONF,
    TERRAFORM_ROOT,
    blocks_in_dir,
    check_backend,
    check_checkov_skips,
    check_literal_secrets,
    check_module_layout,
    check_parse,
    check_placeholders,
    check_provider_pins,
    check_s3_buckets,
    check_secret_variables,
    check_sensitive_outputs,
    check_variables,
    checkov_binary,
    conf_placeholders,
    output_names,
    run_checkov,
    tf_files,
)

pytestmark = pytest.mark.infra

MODULES = TERRAFORM_ROOT / "modules"
ENVIRONMENTS = ("prod", "staging")
EXPECTED_MODULES = {"network", "kafka", "spark", "redis", "lake", "airflow"}
# The only actions granted on Resource "*": AWS offers no resource-level scoping for them.
UNSCOPABLE_ACTIONS = {"s3:GetAccountPublicAccessBlock", "cloudwatch:PutMetricData"}
# kafka-cluster actions on the cluster itself; every other one must name topics, groups or ids.
CLUSTER_ACTIONS = {
    "kafka-cluster:Connect", "kafka-cluster:DescribeCluster", "kafka-cluster:WriteDataIdempotently",
}


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
    """A copy of the lake module with an untyped variable, no public access block, a public ACL."""
    shutil.copytree(MODULES / "lake", tmp_path / "modules" / "lake")
    shutil.copytree(MODULES / "kms", tmp_path / "modules" / "kms")
    lake = tmp_path / "modules" / "lake"
    variables = lake / "variables.tf"
    variables.write_text(variables.read_text() + '\nvariable "owner" {\n  description = "Who owns it."\n}\n')
    main = lake / "main.tf"
    text = remove_block(main.read_text(), 'resource "aws_s3_bucket_public_access_block" "this"')
    text += (
        '\nresource "aws_s3_bucket_acl" "public" {\n  for_each = local.buckets\n\n'
        '  bucket = aws_s3_bucket.this[each.key].id\n  acl    = "public-read"\n}\n'
    )
    main.write_text(text)
    return lake


# --------------------------------------------------------------------------- the real tree


def test_every_tf_file_parses():
    files = tf_files(TERRAFORM_ROOT)
    assert {f.parent.name for f in files} >= EXPECTED_MODULES | set(ENVIRONMENTS)
    assert check_parse(TERRAFORM_ROOT) == []


def test_every_variable_is_typed_and_described():
    assert check_variables(TERRAFORM_ROOT) == []


def test_modules_follow_the_house_layout():
    assert {d.name for d in MODULES.iterdir() if d.is_dir()} >= EXPECTED_MODULES
    assert check_module_layout(MODULES) == []


def test_providers_are_pinned_and_state_is_remote_encrypted_and_locked():
    assert check_provider_pins(TERRAFORM_ROOT) == []
    for env in ENVIRONMENTS:
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


def test_staging_runs_the_same_wiring_as_prod():
    """Staging differs from prod only in variable defaults (sizes, switches), never in structure."""
    prod, staging = (TERRAFORM_ROOT / "environments" / env for env in ENVIRONMENTS)
    assert (prod / "main.tf").read_text() == (staging / "main.tf").read_text()
    assert output_names(prod) == output_names(staging)
    variables = [{b.labels for b in blocks_in_dir(env, "variable")} for env in (prod, staging)]
    assert variables[0] == variables[1]


def test_kafka_is_tls_only_with_scram_from_a_cmk_encrypted_secret():
    resources = {b.labels: b.body for b in blocks_in_dir(MODULES / "kafka", "resource")}
    cluster = resources[("aws_msk_cluster", "this")]
    encryption = cluster["encryption_info"][0]
    assert encryption["encryption_in_transit"][0]["client_broker"] == "TLS"
    assert "module.kms.key_arn" in encryption["encryption_at_rest_kms_key_arn"]
    assert cluster["client_authentication"][0]["sasl"][0]["scram"] is True
    assert cluster["client_authentication"][0]["unauthenticated"] is False
    assert cluster["logging_info"][0]["broker_logs"][0]["cloudwatch_logs"][0]["enabled"] is True
    secret = resources[("aws_secretsmanager_secret", "scram")]
    assert secret["name"].startswith("AmazonMSK_")
    assert "module.kms.key_arn" in secret["kms_key_id"]
    association = resources[("aws_msk_scram_secret_association", "this")]
    assert "aws_secretsmanager_secret.scram.arn" in str(association["secret_arn_list"])


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


def test_checks_catch_a_public_bucket(broken_lake):
    assert check_s3_buckets(MODULES / "lake") == []
    problems = "\n".join(check_s3_buckets(broken_lake))
    assert "resource.aws_s3_bucket_acl.public" in problems and "acl = 'public-read'" in problems
    assert "resource.aws_s3_bucket.this" in problems
    assert "no aws_s3_bucket_public_access_block references it" in problems


def test_checkov_fails_on_a_public_bucket(broken_lake, checkov):
    report = run_checkov(broken_lake, checkov)
    assert report.returncode != 0
    assert {"CKV2_AWS_6", "CKV_AWS_20"} <= report.failed_ids, report.failed


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
