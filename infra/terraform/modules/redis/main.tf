# ElastiCache (Redis OSS or Valkey) for the live summaries: a primary and replicas across
# AZs with automatic failover, TLS in transit, KMS encryption at rest, an AUTH token that is
# generated here and stored only in Secrets Manager (and the encrypted state), daily
# snapshots and the slow log in CloudWatch.

locals {
  log_group_name = "/aws/elasticache/${var.name}/slow-log"
  multi_node     = var.num_cache_clusters > 1
}

module "kms" {
  source = "../kms"

  name                 = "${var.name}-redis"
  description          = "${var.name}: ElastiCache data at rest, AUTH secret, slow log"
  log_group_names      = [local.log_group_name]
  deletion_window_days = var.kms_deletion_window_days
  tags                 = var.tags
}

################################################################################
# AUTH token. ElastiCache accepts 16-128 printable characters except / " @ and spaces.
# Bump var.credential_rotation to rotate (docs/runbooks/terraform.md).
################################################################################

resource "random_password" "auth" {
  length           = 64
  special          = true
  override_special = "!&#$^<>-"

  keepers = {
    rotation = var.credential_rotation
  }
}

resource "aws_secretsmanager_secret" "auth" {
  #checkov:skip=CKV2_AWS_57:ElastiCache AUTH rotation needs the ROTATE-then-SET sequence on the replication group; it is a Terraform change (bump credential_rotation), see docs/runbooks/terraform.md
  name                    = "${var.name}/redis-auth"
  description             = "AUTH token of ElastiCache replication group ${var.name}"
  kms_key_id              = module.kms.key_arn
  recovery_window_in_days = var.secret_recovery_window_days

  tags = var.tags
}

resource "aws_secretsmanager_secret_version" "auth" {
  secret_id     = aws_secretsmanager_secret.auth.id
  secret_string = jsonencode({ password = random_password.auth.result })
}

################################################################################
# Replication group
################################################################################

resource "aws_elasticache_subnet_group" "this" {
  name        = var.name
  description = "Private subnets of ${var.name}"
  subnet_ids  = var.subnet_ids

  tags = var.tags
}

resource "aws_cloudwatch_log_group" "slow_log" {
  name              = local.log_group_name
  retention_in_days = var.log_retention_days
  kms_key_id        = module.kms.key_arn

  tags = var.tags
}

resource "aws_elasticache_replication_group" "this" {
  replication_group_id = var.name
  description          = "kappa live summaries"

  engine               = var.engine
  engine_version       = var.engine_version
  node_type            = var.node_type
  num_cache_clusters   = var.num_cache_clusters
  port                 = var.port
  parameter_group_name = var.parameter_group_name

  subnet_group_name  = aws_elasticache_subnet_group.this.name
  security_group_ids = var.security_group_ids

  automatic_failover_enabled = local.multi_node
  multi_az_enabled           = local.multi_node

  at_rest_encryption_enabled = true
  kms_key_id                 = module.kms.key_arn
  transit_encryption_enabled = true
  transit_encryption_mode    = "required"
  auth_token                 = random_password.auth.result
  auth_token_update_strategy = var.auth_token_update_strategy

  snapshot_retention_limit   = var.snapshot_retention_limit
  snapshot_window            = var.snapshot_window
  maintenance_window         = var.maintenance_window
  auto_minor_version_upgrade = true
  apply_immediately          = var.apply_immediately

  log_delivery_configuration {
    destination      = aws_cloudwatch_log_group.slow_log.name
    destination_type = "cloudwatch-logs"
    log_format       = "json"
    log_type         = "slow-log"
  }

  tags = merge(var.tags, { Name = var.name })
}
