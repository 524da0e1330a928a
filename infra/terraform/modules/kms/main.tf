# A customer-managed KMS key with rotation and an explicit key policy: the account administers
# it through IAM (so only roles whose IAM policies name this key can use it), and CloudWatch
# Logs may use it for the named log groups only. Every platform module that encrypts data
# or logs takes its key from here.

data "aws_caller_identity" "current" {}

data "aws_region" "current" {}

data "aws_partition" "current" {}

locals {
  account_id = data.aws_caller_identity.current.account_id
  region     = data.aws_region.current.region
  partition  = data.aws_partition.current.partition
}

data "aws_iam_policy_document" "this" {
  #checkov:skip=CKV_AWS_109:Key policy: Resource "*" is this key alone, and the account-root statement delegates its use to IAM policies that name the key
  #checkov:skip=CKV_AWS_111:Key policy: Resource "*" is this key alone, and the account-root statement delegates its use to IAM policies that name the key
  #checkov:skip=CKV_AWS_356:Key policy: Resource "*" is this key alone; a key policy cannot name its own ARN
  statement {
    sid       = "AccountAdministersTheKeyThroughIAM"
    actions   = ["kms:*"]
    resources = ["*"]

    principals {
      type        = "AWS"
      identifiers = ["arn:${local.partition}:iam::${local.account_id}:root"]
    }
  }

  dynamic "statement" {
    for_each = length(var.log_group_names) > 0 ? [var.log_group_names] : []

    content {
      sid       = "CloudWatchLogsEncryptsTheNamedLogGroups"
      actions   = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
      resources = ["*"]

      principals {
        type        = "Service"
        identifiers = ["logs.${local.region}.amazonaws.com"]
      }

      condition {
        test     = "ArnEquals"
        variable = "kms:EncryptionContext:aws:logs:arn"
        values   = [for name in statement.value : "arn:${local.partition}:logs:${local.region}:${local.account_id}:log-group:${name}"]
      }
    }
  }
}

resource "aws_kms_key" "this" {
  description             = var.description
  enable_key_rotation     = true
  deletion_window_in_days = var.deletion_window_days
  policy                  = data.aws_iam_policy_document.this.json

  tags = var.tags
}

resource "aws_kms_alias" "this" {
  name          = "alias/${var.name}"
  target_key_id = aws_kms_key.this.key_id
}
