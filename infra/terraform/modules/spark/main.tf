# EMR Serverless application that runs every kappa Spark job (the streaming job, the loader,
# backfills), the S3 location its job code and config are read from, and the job runtime
# role those jobs assume: it reaches the platform's topics, groups and transactional ids,
# its lake prefixes, the credentials it needs, and nothing else.

data "aws_caller_identity" "current" {}

data "aws_region" "current" {}

data "aws_partition" "current" {}

locals {
  account_id     = data.aws_caller_identity.current.account_id
  region         = data.aws_region.current.region
  partition      = data.aws_partition.current.partition
  log_group_name = "/aws/emr-serverless/${var.name}"

  artifacts_uri  = "s3://${var.artifacts_bucket_name}/${var.artifacts_prefix}/"
  event_logs_uri = "s3://${var.artifacts_bucket_name}/${var.event_logs_prefix}/"

  topic_arns            = [for topic in var.kafka_topics : "${var.kafka_topic_arn_prefix}/${topic}"]
  group_arns            = ["${var.kafka_group_arn_prefix}/${var.kafka_client_prefix}*"]
  transactional_id_arns = ["${var.kafka_transactional_id_arn_prefix}/${var.kafka_client_prefix}*"]
}

module "kms" {
  source = "../kms"

  name                 = "${var.name}-spark"
  description          = "${var.name}: EMR Serverless job logs"
  log_group_names      = [local.log_group_name]
  deletion_window_days = var.kms_deletion_window_days
  tags                 = var.tags
}

resource "aws_cloudwatch_log_group" "this" {
  name              = local.log_group_name
  retention_in_days = var.log_retention_days
  kms_key_id        = module.kms.key_arn

  tags = var.tags
}

################################################################################
# Application
################################################################################

resource "aws_emrserverless_application" "this" {
  name          = var.name
  release_label = var.release_label
  type          = "spark"
  architecture  = var.architecture

  maximum_capacity {
    cpu    = var.maximum_capacity.cpu
    memory = var.maximum_capacity.memory
    disk   = var.maximum_capacity.disk
  }

  dynamic "initial_capacity" {
    for_each = var.initial_capacity

    content {
      initial_capacity_type = initial_capacity.key

      initial_capacity_config {
        worker_count = initial_capacity.value.worker_count

        worker_configuration {
          cpu    = initial_capacity.value.cpu
          memory = initial_capacity.value.memory
        }
      }
    }
  }

  auto_start_configuration {
    enabled = true
  }

  auto_stop_configuration {
    enabled              = true
    idle_timeout_minutes = var.idle_timeout_minutes
  }

  dynamic "image_configuration" {
    for_each = var.image_uri == null ? [] : [var.image_uri]

    content {
      image_uri = image_configuration.value
    }
  }

  network_configuration {
    subnet_ids         = var.subnet_ids
    security_group_ids = var.security_group_ids
  }

  monitoring_configuration {
    cloudwatch_logging_configuration {
      enabled                = true
      log_group_name         = aws_cloudwatch_log_group.this.name
      log_stream_name_prefix = "jobs"
    }

    # Event logs for the Spark history server; the bucket's default SSE-KMS encrypts them.
    s3_monitoring_configuration {
      log_uri = local.event_logs_uri
    }

    managed_persistence_monitoring_configuration {
      enabled = true
    }
  }

  tags = merge(var.tags, { Name = var.name })
}

################################################################################
# Job runtime role
################################################################################

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["emr-serverless.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }

    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = [aws_emrserverless_application.this.arn]
    }
  }
}

resource "aws_iam_role" "job" {
  name_prefix        = "${var.name}-job-"
  description        = "Runtime role of the kappa Spark jobs on EMR Serverless application ${var.name}"
  assume_role_policy = data.aws_iam_policy_document.assume.json

  tags = var.tags
}

data "aws_iam_policy_document" "job" {
  statement {
    sid       = "ListOwnPrefixes"
    actions   = ["s3:ListBucket"]
    resources = [var.artifacts_bucket_arn, var.tables_bucket_arn, var.checkpoints_bucket_arn]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values = [
        "${var.artifacts_prefix}/*", "${var.tables_prefix}/*", "${var.checkpoints_prefix}/*",
        var.artifacts_prefix, var.tables_prefix, var.checkpoints_prefix,
      ]
    }
  }

  statement {
    sid       = "ReadJobCodeAndConfig"
    actions   = ["s3:GetObject"]
    resources = ["${var.artifacts_bucket_arn}/${var.artifacts_prefix}/*"]
  }

  statement {
    sid       = "WriteSparkEventLogs"
    actions   = ["s3:PutObject", "s3:GetObject"]
    resources = ["${var.artifacts_bucket_arn}/${var.event_logs_prefix}/*"]
  }

  statement {
    sid = "ReadWriteDeltaTablesAndCheckpoints"
    actions = [
      "s3:GetObject", "s3:PutObject", "s3:DeleteObject",
      "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts",
    ]
    resources = [
      "${var.tables_bucket_arn}/${var.tables_prefix}/*",
      "${var.checkpoints_bucket_arn}/${var.checkpoints_prefix}/*",
    ]
  }

  statement {
    sid       = "UseTheLakeKeyThroughS3AndDynamoDB"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.lake_kms_key_arn]

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${local.region}.amazonaws.com", "dynamodb.${local.region}.amazonaws.com"]
    }
  }

  dynamic "statement" {
    for_each = var.delta_lock_table_arn == null ? [] : [var.delta_lock_table_arn]

    content {
      sid       = "DeltaCommitLock"
      actions   = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:Query", "dynamodb:DescribeTable"]
      resources = [statement.value]
    }
  }

  statement {
    sid       = "ReadKafkaAndRedisCredentials"
    actions   = ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"]
    resources = var.secret_arns
  }

  statement {
    sid       = "DecryptThoseCredentials"
    actions   = ["kms:Decrypt"]
    resources = var.secret_kms_key_arns

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["secretsmanager.${local.region}.amazonaws.com"]
    }
  }

  statement {
    sid       = "KafkaConnect"
    actions   = ["kafka-cluster:Connect", "kafka-cluster:DescribeCluster", "kafka-cluster:WriteDataIdempotently"]
    resources = [var.kafka_cluster_arn]
  }

  statement {
    sid       = "KafkaPlatformTopics"
    actions   = ["kafka-cluster:DescribeTopic", "kafka-cluster:ReadData", "kafka-cluster:WriteData"]
    resources = local.topic_arns
  }

  statement {
    sid       = "KafkaOwnConsumerGroups"
    actions   = ["kafka-cluster:DescribeGroup", "kafka-cluster:AlterGroup"]
    resources = local.group_arns
  }

  statement {
    sid       = "KafkaOwnTransactionalIds"
    actions   = ["kafka-cluster:DescribeTransactionalId", "kafka-cluster:AlterTransactionalId"]
    resources = local.transactional_id_arns
  }

  statement {
    sid       = "WriteJobLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
    resources = ["${aws_cloudwatch_log_group.this.arn}:*"]
  }

  statement {
    sid       = "FindTheJobLogGroup"
    actions   = ["logs:DescribeLogGroups"]
    resources = ["arn:${local.partition}:logs:${local.region}:${local.account_id}:log-group:*"]
  }
}

resource "aws_iam_role_policy" "job" {
  name   = "kappa-spark-job"
  role   = aws_iam_role.job.id
  policy = data.aws_iam_policy_document.job.json
}
