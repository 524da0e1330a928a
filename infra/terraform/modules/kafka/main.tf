# Amazon MSK (provisioned): the platform's system of record. Brokers live in the private
# subnets, one per AZ; clients connect with TLS only and authenticate with SASL/SCRAM
# (SCRAM-SHA-512, one user per workload, each credential in its own Secrets Manager secret) or
# IAM. SCRAM users are authorised by Kafka ACLs (modules/kafka-acls, applied from
# environments/<env>-acls); with allow.everyone.if.no.acl.found = false a user without an ACL
# reaches nothing. Data at rest, the SCRAM secrets and the broker log group are encrypted with
# this module's customer-managed key.

data "aws_caller_identity" "current" {}

data "aws_region" "current" {}

data "aws_partition" "current" {}

locals {
  account_id     = data.aws_caller_identity.current.account_id
  region         = data.aws_region.current.region
  partition      = data.aws_partition.current.partition
  log_group_name = "/aws/msk/${var.name}/broker"

  # Broker settings the platform relies on: topics exist only through `kappa topics apply`,
  # writes are acknowledged by two of three replicas, and no unclean leader loses data.
  server_properties = merge({
    "auto.create.topics.enable"        = "false"
    "default.replication.factor"       = tostring(min(3, var.broker_count))
    "min.insync.replicas"              = tostring(min(2, var.broker_count))
    "unclean.leader.election.enable"   = "false"
    "allow.everyone.if.no.acl.found"   = tostring(var.allow_everyone_if_no_acl_found)
    "num.partitions"                   = "3"
    "transaction.state.log.min.isr"    = tostring(min(2, var.broker_count))
    "offsets.topic.replication.factor" = tostring(min(3, var.broker_count))
  }, var.server_properties)

  # ARN prefixes for IAM-authorised Kafka resources (kafka-cluster:* actions).
  resource_suffix = "${var.name}/${aws_msk_cluster.this.cluster_uuid}"
  arn_base        = "arn:${local.partition}:kafka:${local.region}:${local.account_id}"

  # One SCRAM user (and secret) per workload; the user name is the ACL principal User:<name>.
  scram_users = toset(var.scram_users)
}

################################################################################
# Customer-managed key: MSK rejects SCRAM secrets encrypted with the AWS-managed key
################################################################################

module "kms" {
  source = "../kms"

  name                 = "${var.name}-kafka"
  description          = "${var.name}: MSK data at rest, SCRAM secrets, broker logs"
  log_group_names      = [local.log_group_name]
  deletion_window_days = var.kms_deletion_window_days
  tags                 = var.tags
}

################################################################################
# Broker configuration and logs
################################################################################

resource "aws_msk_configuration" "this" {
  name           = "${var.name}-${replace(var.kafka_version, ".", "-")}"
  kafka_versions = [var.kafka_version]
  description    = "kappa broker settings"

  server_properties = join("\n", [for key in sort(keys(local.server_properties)) : "${key} = ${local.server_properties[key]}"])

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_cloudwatch_log_group" "broker" {
  name              = local.log_group_name
  retention_in_days = var.log_retention_days
  kms_key_id        = module.kms.key_arn

  tags = var.tags
}

################################################################################
# Cluster
################################################################################

resource "aws_msk_cluster" "this" {
  cluster_name           = var.name
  kafka_version          = var.kafka_version
  number_of_broker_nodes = var.broker_count
  enhanced_monitoring    = var.enhanced_monitoring

  broker_node_group_info {
    instance_type   = var.broker_instance_type
    client_subnets  = var.subnet_ids
    security_groups = var.security_group_ids

    storage_info {
      ebs_storage_info {
        volume_size = var.broker_volume_size
      }
    }

    connectivity_info {
      public_access {
        type = "DISABLED"
      }
    }
  }

  client_authentication {
    unauthenticated = false

    sasl {
      scram = true
      iam   = true
    }
  }

  encryption_info {
    encryption_at_rest_kms_key_arn = module.kms.key_arn

    encryption_in_transit {
      client_broker = "TLS"
      in_cluster    = true
    }
  }

  configuration_info {
    arn      = aws_msk_configuration.this.arn
    revision = aws_msk_configuration.this.latest_revision
  }

  open_monitoring {
    prometheus {
      jmx_exporter {
        enabled_in_broker = true
      }
      node_exporter {
        enabled_in_broker = true
      }
    }
  }

  logging_info {
    broker_logs {
      cloudwatch_logs {
        enabled   = true
        log_group = aws_cloudwatch_log_group.broker.name
      }
    }
  }

  tags = merge(var.tags, { Name = var.name })
}

################################################################################
# SASL/SCRAM credentials, one user per workload: generated here, stored only in Secrets
# Manager (and the encrypted state). Bump var.credential_rotation (all users) or a user's entry
# in var.user_credential_rotation to rotate (docs/runbooks/terraform.md).
################################################################################

resource "random_password" "scram" {
  for_each = local.scram_users

  length           = 40
  special          = true
  override_special = "-_=+.!#%"

  keepers = {
    rotation      = var.credential_rotation
    user_rotation = lookup(var.user_credential_rotation, each.key, 0)
  }
}

resource "aws_secretsmanager_secret" "scram" {
  #checkov:skip=CKV2_AWS_57:MSK SCRAM secrets have no AWS rotation function; rotation is a Terraform change (bump credential_rotation), see docs/runbooks/terraform.md
  for_each = local.scram_users

  name                    = "AmazonMSK_${var.name}_${each.key}"
  description             = "SASL/SCRAM-SHA-512 credential of the kappa ${each.key} workload on MSK cluster ${var.name}"
  kms_key_id              = module.kms.key_arn
  recovery_window_in_days = var.secret_recovery_window_days

  tags = merge(var.tags, { KafkaUser = each.key })
}

resource "aws_secretsmanager_secret_version" "scram" {
  for_each = local.scram_users

  secret_id = aws_secretsmanager_secret.scram[each.key].id
  secret_string = jsonencode({
    username = each.key
    password = random_password.scram[each.key].result
  })
}

# MSK attaches exactly this policy when a secret is associated; declaring it keeps plans
# clean (and if the policy or the key ever changes, re-associate: see the runbook).
data "aws_iam_policy_document" "scram_secret" {
  #checkov:skip=CKV_AWS_108:Each document covers one secret, to the MSK service only; the lower-case action mirrors what MSK attaches (no drift) and cloudsplaining does not match it case-insensitively
  for_each = local.scram_users

  statement {
    sid       = "AWSKafkaResourcePolicy"
    actions   = ["secretsmanager:getSecretValue"]
    resources = [aws_secretsmanager_secret.scram[each.key].arn]

    principals {
      type        = "Service"
      identifiers = ["kafka.amazonaws.com"]
    }
  }
}

resource "aws_secretsmanager_secret_policy" "scram" {
  for_each = local.scram_users

  secret_arn = aws_secretsmanager_secret.scram[each.key].arn
  policy     = data.aws_iam_policy_document.scram_secret[each.key].json
}

resource "aws_msk_scram_secret_association" "this" {
  cluster_arn     = aws_msk_cluster.this.arn
  secret_arn_list = [for user in sort(var.scram_users) : aws_secretsmanager_secret.scram[user].arn]

  depends_on = [aws_secretsmanager_secret_version.scram, aws_secretsmanager_secret_policy.scram]
}

################################################################################
# Optional: what the host that administers Kafka needs (the CI runner or bastion in the
# network module's kafka-admin security group). It applies environments/<env>-acls over IAM
# authentication (port 9098; Kafka ACLs do not apply to IAM principals, so no super user is
# needed) and reads the secrets of var.admin_scram_users (the topic operator's).
################################################################################

data "aws_iam_policy_document" "admin" {
  count = var.create_admin_policy ? 1 : 0

  statement {
    sid       = "FindTheClusterAndItsBrokers"
    actions   = ["kafka:DescribeCluster", "kafka:DescribeClusterV2", "kafka:GetBootstrapBrokers"]
    resources = [aws_msk_cluster.this.arn]
  }

  statement {
    sid       = "LookUpTheClusterByName"
    actions   = ["kafka:ListClusters", "kafka:ListClustersV2"]
    resources = ["*"]
  }

  statement {
    sid       = "ManageKafkaAclsOverIam"
    actions   = ["kafka-cluster:Connect", "kafka-cluster:DescribeCluster", "kafka-cluster:AlterCluster"]
    resources = [aws_msk_cluster.this.arn]
  }

  dynamic "statement" {
    for_each = length(var.admin_scram_users) == 0 ? [] : [1]

    content {
      sid       = "ReadTheOperatorCredentials"
      actions   = ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"]
      resources = [for user in var.admin_scram_users : aws_secretsmanager_secret.scram[user].arn]
    }
  }

  dynamic "statement" {
    for_each = length(var.admin_scram_users) == 0 ? [] : [1]

    content {
      sid       = "DecryptThemThroughSecretsManager"
      actions   = ["kms:Decrypt"]
      resources = [module.kms.key_arn]

      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["secretsmanager.${local.region}.amazonaws.com"]
      }
    }
  }
}

resource "aws_iam_policy" "admin" {
  count = var.create_admin_policy ? 1 : 0

  name_prefix = "${var.name}-kafka-admin-"
  description = "Kafka ACL administration over IAM on MSK cluster ${var.name}, and the operator's SCRAM credential"
  policy      = data.aws_iam_policy_document.admin[0].json

  tags = var.tags
}
