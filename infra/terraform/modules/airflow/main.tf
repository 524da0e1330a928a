# Amazon MWAA: the orchestrator. DAGs and requirements.txt come from the DAGs bucket; tasks
# submit Spark jobs to EMR Serverless (passing only the Spark job role), read the lake for
# data-quality checks, reset checkpoints during recovery, and look up Kafka offsets for
# backfills. The execution role grants exactly that, plus what MWAA itself needs.

data "aws_caller_identity" "current" {}

data "aws_region" "current" {}

data "aws_partition" "current" {}

locals {
  account_id = data.aws_caller_identity.current.account_id
  region     = data.aws_region.current.region
  partition  = data.aws_partition.current.partition

  environment_arn  = "arn:${local.partition}:airflow:${local.region}:${local.account_id}:environment/${var.name}"
  requirements_key = "requirements/requirements.txt"
}

################################################################################
# requirements.txt, versioned in the DAGs bucket; MWAA pins the object version it installs
################################################################################

resource "aws_s3_object" "requirements" {
  bucket                 = var.dags_bucket_name
  key                    = local.requirements_key
  content                = var.requirements_txt
  content_type           = "text/plain"
  server_side_encryption = "aws:kms"
  kms_key_id             = var.dags_kms_key_arn

  tags = var.tags
}

################################################################################
# Environment
################################################################################

resource "aws_mwaa_environment" "this" {
  name               = var.name
  airflow_version    = var.airflow_version
  environment_class  = var.environment_class
  execution_role_arn = aws_iam_role.execution.arn
  kms_key            = var.kms_key_arn

  source_bucket_arn              = var.dags_bucket_arn
  dag_s3_path                    = var.dag_s3_path
  requirements_s3_path           = aws_s3_object.requirements.key
  requirements_s3_object_version = aws_s3_object.requirements.version_id

  min_workers                     = var.min_workers
  max_workers                     = var.max_workers
  schedulers                      = var.schedulers
  webserver_access_mode           = var.webserver_access_mode
  weekly_maintenance_window_start = var.weekly_maintenance_window_start

  airflow_configuration_options = merge({
    "core.load_examples"           = "false"
    "core.default_task_retries"    = "2"
    "scheduler.catchup_by_default" = "false"
  }, var.airflow_configuration_options)

  network_configuration {
    security_group_ids = var.security_group_ids
    subnet_ids         = var.subnet_ids
  }

  logging_configuration {
    dag_processing_logs {
      enabled   = true
      log_level = var.log_level
    }

    scheduler_logs {
      enabled   = true
      log_level = var.log_level
    }

    task_logs {
      enabled   = true
      log_level = var.log_level
    }

    webserver_logs {
      enabled   = true
      log_level = var.log_level
    }

    worker_logs {
      enabled   = true
      log_level = var.log_level
    }
  }

  tags = merge(var.tags, { Name = var.name })

  # MWAA checks what the execution role may do while it creates the environment.
  depends_on = [aws_iam_role_policy.execution]
}

################################################################################
# Execution role
################################################################################

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["airflow.amazonaws.com", "airflow-env.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }
}

resource "aws_iam_role" "execution" {
  name_prefix        = "${var.name}-exec-"
  description        = "Execution role of MWAA environment ${var.name}"
  assume_role_policy = data.aws_iam_policy_document.assume.json

  tags = var.tags
}

data "aws_iam_policy_document" "execution" {
  # What MWAA itself needs (AWS's documented execution-role policy, scoped to this environment).
  statement {
    sid       = "PublishEnvironmentMetrics"
    actions   = ["airflow:PublishMetrics"]
    resources = [local.environment_arn]
  }

  statement {
    sid       = "ReadTheDagsBucket"
    actions   = ["s3:GetObject*", "s3:GetBucket*", "s3:List*"]
    resources = [var.dags_bucket_arn, "${var.dags_bucket_arn}/*"]
  }

  statement {
    sid       = "CheckAccountPublicAccessBlock"
    actions   = ["s3:GetAccountPublicAccessBlock"]
    resources = ["*"]
  }

  statement {
    sid = "WriteEnvironmentLogs"
    actions = [
      "logs:CreateLogStream", "logs:CreateLogGroup", "logs:PutLogEvents", "logs:GetLogEvents",
      "logs:GetLogRecord", "logs:GetLogGroupFields", "logs:GetQueryResults",
    ]
    resources = ["arn:${local.partition}:logs:${local.region}:${local.account_id}:log-group:airflow-${var.name}-*"]
  }

  statement {
    sid       = "FindLogGroups"
    actions   = ["logs:DescribeLogGroups"]
    resources = ["arn:${local.partition}:logs:${local.region}:${local.account_id}:log-group:*"]
  }

  statement {
    sid       = "PublishMetricsToCloudWatch"
    actions   = ["cloudwatch:PutMetricData"]
    resources = ["*"]

    condition {
      test     = "StringLike"
      variable = "cloudwatch:namespace"
      values   = ["AmazonMWAA", "AWS/MWAA"]
    }
  }

  # MWAA's Celery queue lives in an AWS-owned account, hence the account wildcard.
  statement {
    sid       = "UseTheCeleryQueue"
    actions   = ["sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:ReceiveMessage", "sqs:SendMessage"]
    resources = ["arn:${local.partition}:sqs:${local.region}:*:airflow-celery-*"]
  }

  statement {
    sid           = "UseTheQueueKeyThroughSqs"
    actions       = ["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey*", "kms:Encrypt"]
    not_resources = ["arn:${local.partition}:kms:*:${local.account_id}:key/*"]

    condition {
      test     = "StringLike"
      variable = "kms:ViaService"
      values   = ["sqs.${local.region}.amazonaws.com"]
    }
  }

  # What the kappa DAGs need.
  statement {
    sid       = "DecryptDagsAndLakeThroughS3"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = distinct([var.dags_kms_key_arn, var.lake_kms_key_arn])

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${local.region}.amazonaws.com"]
    }
  }

  statement {
    sid = "RunSparkJobs"
    actions = [
      "emr-serverless:GetApplication", "emr-serverless:StartApplication",
      "emr-serverless:StartJobRun", "emr-serverless:GetJobRun", "emr-serverless:CancelJobRun",
      "emr-serverless:ListJobRuns", "emr-serverless:GetDashboardForJobRun",
    ]
    resources = [var.spark_application_arn, "${var.spark_application_arn}/jobruns/*"]
  }

  statement {
    sid       = "PassOnlyTheSparkJobRole"
    actions   = ["iam:PassRole"]
    resources = [var.spark_job_role_arn]

    condition {
      test     = "StringEquals"
      variable = "iam:PassedToService"
      values   = ["emr-serverless.amazonaws.com"]
    }
  }

  statement {
    sid       = "ListLakeAndCheckpointPrefixes"
    actions   = ["s3:ListBucket"]
    resources = [var.tables_bucket_arn, var.checkpoints_bucket_arn]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.tables_prefix}/*", "${var.checkpoints_prefix}/*", var.tables_prefix, var.checkpoints_prefix]
    }
  }

  statement {
    sid       = "ReadDeltaTablesForQualityChecks"
    actions   = ["s3:GetObject"]
    resources = ["${var.tables_bucket_arn}/${var.tables_prefix}/*"]
  }

  statement {
    sid       = "RecoverCheckpoints"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
    resources = ["${var.checkpoints_bucket_arn}/${var.checkpoints_prefix}/*"]
  }

  statement {
    sid       = "ReadTheKafkaCredential"
    actions   = ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"]
    resources = [var.kafka_secret_arn]
  }

  statement {
    sid       = "DecryptTheKafkaCredential"
    actions   = ["kms:Decrypt"]
    resources = [var.kafka_secret_kms_key_arn]

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["secretsmanager.${local.region}.amazonaws.com"]
    }
  }

  statement {
    sid       = "KafkaConnectReadOnly"
    actions   = ["kafka-cluster:Connect", "kafka-cluster:DescribeCluster"]
    resources = [var.kafka_cluster_arn]
  }

  statement {
    sid       = "KafkaDescribeOffsets"
    actions   = ["kafka-cluster:DescribeTopic", "kafka-cluster:DescribeGroup"]
    resources = concat(var.kafka_topic_arns, var.kafka_group_arns)
  }
}

resource "aws_iam_role_policy" "execution" {
  name   = "kappa-mwaa-execution"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.execution.json
}
