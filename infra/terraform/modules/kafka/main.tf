# Amazon MSK (provisioned): the platform's system of record. Brokers live in the private
# subnets, one per AZ; clients connect with TLS only and authenticate with SASL/SCRAM
# (SCRAM-SHA-512, the credential in Secrets Manager) or IAM. Data at rest, the SCRAM
# secret and the broker log group are encrypted with this module's customer-managed key.

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
}

################################################################################
# Customer-managed key: MSK rejects SCRAM secrets encrypted with the AWS-managed key
################################################################################

module "kms" {
  source = "../kms"

  name                 = "${var.name}-kafka"
  description          = "${var.name}: MSK data at rest, SCRAM secret, broker logs"
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
# SASL/SCRAM credential: generated here, stored only in Secrets Manager (and the encrypted
# state). Bump var.credential_rotation to rotate (docs/runbooks/terraform.md).
################################################################################

resource "random_password" "scram" {
  length           = 40
  special          = true
  override_special = "-_=+.!#%"

  keepers = {
    rotation = var.credential_rotation
  }
}

resource "aws_secretsmanager_secret" "scram" {
  #checkov:skip=CKV2_AWS_57:MSK SCRAM secrets have no AWS rotation function; rotation is a Terraform change (bump credential_rotation), see docs/runbooks/terraform.md
  name                    = "AmazonMSK_${var.name}_${var.scram_username}"
  description             = "SASL/SCRAM-SHA-512 credential of the kappa jobs on MSK cluster ${var.name}"
  kms_key_id              = module.kms.key_arn
  recovery_window_in_days = var.secret_recovery_window_days

  tags = var.tags
}

resource "aws_secretsmanager_secret_version" "scram" {
  secret_id = aws_secretsmanager_secret.scram.id
  secret_string = jsonencode({
    username = var.scram_username
    password = random_password.scram.result
  })
}

# MSK attaches exactly this policy when the secret is associated; declaring it keeps plans
# clean (and if the policy or the key ever changes, re-associate: see the runbook).
data "aws_iam_policy_document" "scram_secret" {
  #checkov:skip=CKV_AWS_108:One secret, to the MSK service only; the lower-case action mirrors what MSK attaches (no drift) and cloudsplaining does not match it case-insensitively
  statement {
    sid       = "AWSKafkaResourcePolicy"
    actions   = ["secretsmanager:getSecretValue"]
    resources = [aws_secretsmanager_secret.scram.arn]

    principals {
      type        = "Service"
      identifiers = ["kafka.amazonaws.com"]
    }
  }
}

resource "aws_secretsmanager_secret_policy" "scram" {
  secret_arn = aws_secretsmanager_secret.scram.arn
  policy     = data.aws_iam_policy_document.scram_secret.json
}

resource "aws_msk_scram_secret_association" "this" {
  cluster_arn     = aws_msk_cluster.this.arn
  secret_arn_list = [aws_secretsmanager_secret.scram.arn]

  depends_on = [aws_secretsmanager_secret_version.scram, aws_secretsmanager_secret_policy.scram]
}
