# The lake: one bucket per purpose (Delta tables, streaming checkpoints, job artifacts, MWAA
# DAGs), all KMS-encrypted with S3 bucket keys, versioned, private, TLS-only, logged to an
# access-log bucket, with lifecycle rules that bound what versioning keeps. Optional
# DynamoDB table for delta-rs commit locking on S3.

data "aws_caller_identity" "current" {}

locals {
  account_id = data.aws_caller_identity.current.account_id

  # A map (not an object) so that `condition ? local.buckets : {}` type-checks.
  buckets = tomap({
    tables = {
      name    = "${var.name}-tables-${local.account_id}"
      purpose = "Delta tables (bronze, silver, gold, ops)"
    }
    checkpoints = {
      name    = "${var.name}-checkpoints-${local.account_id}"
      purpose = "Structured Streaming checkpoints"
    }
    artifacts = {
      name    = "${var.name}-artifacts-${local.account_id}"
      purpose = "Spark job code, config, jars and event logs"
    }
    # MWAA's own convention is a bucket named airflow-*; policies written for MWAA match it.
    dags = {
      name    = "airflow-${var.name}-${local.account_id}"
      purpose = "MWAA DAGs, requirements.txt and plugins"
    }
  })
}

################################################################################
# Encryption key shared by the lake buckets (bucket keys keep KMS request costs low)
################################################################################

module "kms" {
  source = "../kms"

  name                 = "${var.name}-lake"
  description          = "${var.name}: lake buckets and the Delta lock table"
  deletion_window_days = var.kms_deletion_window_days
  tags                 = var.tags
}

################################################################################
# Buckets
################################################################################

resource "aws_s3_bucket" "this" {
  for_each = local.buckets
  #checkov:skip=CKV_AWS_144:Cross-region replication is a DR decision per deployment; Kafka retains the source log for replay and the tables can be rebuilt from it
  #checkov:skip=CKV2_AWS_62:No consumer of object-created events exists; jobs are driven by Kafka and Airflow, not by S3 notifications

  bucket        = each.value.name
  force_destroy = var.force_destroy

  tags = merge(var.tags, { Name = each.value.name, Purpose = each.value.purpose })
}

resource "aws_s3_bucket_ownership_controls" "this" {
  for_each = local.buckets

  bucket = aws_s3_bucket.this[each.key].id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "this" {
  for_each = local.buckets

  bucket                  = aws_s3_bucket.this[each.key].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "this" {
  for_each = local.buckets

  bucket = aws_s3_bucket.this[each.key].id

  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "this" {
  for_each = local.buckets

  bucket = aws_s3_bucket.this[each.key].id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = module.kms.key_arn
    }
    bucket_key_enabled = true
  }
}

# Delta's VACUUM and Spark's checkpoint cleanup delete files; versioning keeps them as
# noncurrent versions, which these rules expire after a per-bucket grace period.
resource "aws_s3_bucket_lifecycle_configuration" "this" {
  for_each = local.buckets

  bucket = aws_s3_bucket.this[each.key].id

  rule {
    id     = "expire-noncurrent-versions"
    status = "Enabled"

    filter {}

    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_retention_days[each.key]
    }

    expiration {
      expired_object_delete_marker = true
    }
  }

  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"

    filter {}

    abort_incomplete_multipart_upload {
      days_after_initiation = 7
    }
  }

  depends_on = [aws_s3_bucket_versioning.this]
}

data "aws_iam_policy_document" "bucket" {
  for_each = local.buckets

  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.this[each.key].arn, "${aws_s3_bucket.this[each.key].arn}/*"]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }

  statement {
    sid       = "DenyOutdatedTls"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.this[each.key].arn, "${aws_s3_bucket.this[each.key].arn}/*"]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "NumericLessThan"
      variable = "s3:TlsVersion"
      values   = ["1.2"]
    }
  }
}

resource "aws_s3_bucket_policy" "this" {
  for_each = local.buckets

  bucket = aws_s3_bucket.this[each.key].id
  policy = data.aws_iam_policy_document.bucket[each.key].json

  depends_on = [aws_s3_bucket_public_access_block.this]
}

resource "aws_s3_bucket_logging" "this" {
  for_each = var.enable_access_logging ? local.buckets : {}

  bucket        = aws_s3_bucket.this[each.key].id
  target_bucket = aws_s3_bucket.access_logs[0].id
  target_prefix = "${each.key}/"
}

################################################################################
# Access-log bucket (optional). S3 server access logging cannot deliver to an SSE-KMS
# bucket, so this one alone uses SSE-S3.
################################################################################

resource "aws_s3_bucket" "access_logs" {
  count = var.enable_access_logging ? 1 : 0
  #checkov:skip=CKV_AWS_145:S3 server access log delivery does not support SSE-KMS target buckets; SSE-S3 is used
  #checkov:skip=CKV_AWS_144:Access logs are audit data kept in-region; replicate at the account level if required
  #checkov:skip=CKV2_AWS_62:No consumer of object-created events for access logs

  bucket        = "${var.name}-access-logs-${local.account_id}"
  force_destroy = var.force_destroy

  tags = merge(var.tags, { Name = "${var.name}-access-logs-${local.account_id}", Purpose = "S3 server access logs" })
}

resource "aws_s3_bucket_ownership_controls" "access_logs" {
  count = var.enable_access_logging ? 1 : 0

  bucket = aws_s3_bucket.access_logs[0].id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "access_logs" {
  count = var.enable_access_logging ? 1 : 0

  bucket                  = aws_s3_bucket.access_logs[0].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "access_logs" {
  count = var.enable_access_logging ? 1 : 0

  bucket = aws_s3_bucket.access_logs[0].id

  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "access_logs" {
  count = var.enable_access_logging ? 1 : 0

  bucket = aws_s3_bucket.access_logs[0].id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "access_logs" {
  count = var.enable_access_logging ? 1 : 0

  bucket = aws_s3_bucket.access_logs[0].id

  rule {
    id     = "expire-access-logs"
    status = "Enabled"

    filter {}

    expiration {
      days = var.access_log_retention_days
    }

    noncurrent_version_expiration {
      noncurrent_days = 1
    }

    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }

  depends_on = [aws_s3_bucket_versioning.access_logs]
}

data "aws_iam_policy_document" "access_logs" {
  count = var.enable_access_logging ? 1 : 0

  statement {
    sid       = "S3LogDeliveryFromTheLakeBuckets"
    actions   = ["s3:PutObject"]
    resources = ["${aws_s3_bucket.access_logs[0].arn}/*"]

    principals {
      type        = "Service"
      identifiers = ["logging.s3.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }

    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = [for bucket in aws_s3_bucket.this : bucket.arn]
    }
  }

  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.access_logs[0].arn, "${aws_s3_bucket.access_logs[0].arn}/*"]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "access_logs" {
  count = var.enable_access_logging ? 1 : 0

  bucket = aws_s3_bucket.access_logs[0].id
  policy = data.aws_iam_policy_document.access_logs[0].json

  depends_on = [aws_s3_bucket_public_access_block.access_logs]
}

################################################################################
# Delta commit lock table (optional): delta-rs serialises commits to a table on S3 through
# this DynamoDB table (AWS_S3_LOCKING_PROVIDER=dynamodb, DELTA_DYNAMO_TABLE_NAME=<name>).
################################################################################

resource "aws_dynamodb_table" "delta_log" {
  count = var.create_delta_lock_table ? 1 : 0

  name         = "${var.name}-delta-log"
  billing_mode = "PAY_PER_REQUEST"
  hash_key     = "tablePath"
  range_key    = "fileName"

  attribute {
    name = "tablePath"
    type = "S"
  }

  attribute {
    name = "fileName"
    type = "S"
  }

  ttl {
    attribute_name = "expireTime"
    enabled        = true
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled     = true
    kms_key_arn = module.kms.key_arn
  }

  deletion_protection_enabled = !var.force_destroy

  tags = var.tags
}
