variable "name" {
  type        = string
  description = "Name of the MWAA environment, also the prefix of its execution role."
}

variable "airflow_version" {
  type        = string
  description = "Airflow version MWAA runs; must be one MWAA offers (the DAGs use only the airflow.sdk API of Airflow 3)."
  default     = "3.0.6"
}

variable "environment_class" {
  type        = string
  description = "MWAA environment class: mw1.micro, mw1.small, mw1.medium, mw1.large, mw1.xlarge or mw1.2xlarge."
  default     = "mw1.small"

  validation {
    condition     = contains(["mw1.micro", "mw1.small", "mw1.medium", "mw1.large", "mw1.xlarge", "mw1.2xlarge"], var.environment_class)
    error_message = "environment_class must be one of mw1.micro, mw1.small, mw1.medium, mw1.large, mw1.xlarge, mw1.2xlarge."
  }
}

variable "min_workers" {
  type        = number
  description = "Workers kept running at all times."
  default     = 1
}

variable "max_workers" {
  type        = number
  description = "Workers MWAA may scale up to under load."
  default     = 4
}

variable "schedulers" {
  type        = number
  description = "Number of schedulers (2 or more for availability; mw1.micro supports 1)."
  default     = 2
}

variable "webserver_access_mode" {
  type        = string
  description = "PRIVATE_ONLY (webserver reachable from the VPC: VPN, bastion, peering) or PUBLIC_ONLY (internet, still behind IAM sign-in)."
  default     = "PRIVATE_ONLY"

  validation {
    condition     = contains(["PRIVATE_ONLY", "PUBLIC_ONLY"], var.webserver_access_mode)
    error_message = "webserver_access_mode must be PRIVATE_ONLY or PUBLIC_ONLY."
  }
}

variable "weekly_maintenance_window_start" {
  type        = string
  description = "Start of the weekly maintenance window, DAY:HH:MM in UTC."
  default     = "SUN:06:00"
}

variable "log_level" {
  type        = string
  description = "Level of the scheduler, worker, task, webserver and DAG-processing logs sent to CloudWatch."
  default     = "INFO"

  validation {
    condition     = contains(["CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"], var.log_level)
    error_message = "log_level must be CRITICAL, ERROR, WARNING, INFO or DEBUG."
  }
}

variable "airflow_configuration_options" {
  type        = map(string)
  description = "Airflow configuration overrides merged over the module's defaults (no secrets: use a secrets backend)."
  default     = {}
}

variable "kms_key_arn" {
  type        = string
  description = "Customer-managed KMS key for MWAA's own data (metadata DB, queue, logs), or null for the AWS-owned key."
  default     = null
}

variable "subnet_ids" {
  type        = list(string)
  description = "Exactly two private subnets in different AZs."

  validation {
    condition     = length(var.subnet_ids) == 2
    error_message = "MWAA needs exactly two private subnets."
  }
}

variable "security_group_ids" {
  type        = list(string)
  description = "Security groups of the environment (the network module's airflow group, self-referencing)."
}

variable "dags_bucket_name" {
  type        = string
  description = "Bucket holding DAGs and requirements.txt (versioned, private)."
}

variable "dags_bucket_arn" {
  type        = string
  description = "ARN of the DAGs bucket."
}

variable "dags_kms_key_arn" {
  type        = string
  description = "KMS key encrypting the DAGs bucket."
}

variable "dag_s3_path" {
  type        = string
  description = "Folder of the DAG files in the DAGs bucket."
  default     = "dags"
}

variable "requirements_txt" {
  type        = string
  description = "Content of the requirements.txt MWAA installs (with a --constraint line for the Airflow version)."
}

variable "spark_application_arn" {
  type        = string
  description = "ARN of the EMR Serverless application the DAGs submit jobs to."
}

variable "spark_job_role_arn" {
  type        = string
  description = "Job runtime role the DAGs pass to StartJobRun (the only role they may pass)."
}

variable "tables_bucket_arn" {
  type        = string
  description = "ARN of the Delta tables bucket (read-only for data-quality checks)."
}

variable "tables_prefix" {
  type        = string
  description = "Key prefix of the Delta tables."
}

variable "checkpoints_bucket_arn" {
  type        = string
  description = "ARN of the checkpoints bucket (read-write for checkpoint recovery)."
}

variable "checkpoints_prefix" {
  type        = string
  description = "Key prefix of the streaming checkpoints."
}

variable "lake_kms_key_arn" {
  type        = string
  description = "KMS key of the lake buckets."
}

variable "kafka_cluster_arn" {
  type        = string
  description = "ARN of the MSK cluster (connect and describe only)."
}

variable "kafka_topic_arns" {
  type        = list(string)
  description = "Topic ARNs the DAGs may describe (offsets for backfills and lag checks)."
}

variable "kafka_group_arns" {
  type        = list(string)
  description = "Consumer-group ARNs or patterns the DAGs may describe (committed offsets, lag)."
}

variable "kafka_secret_arn" {
  type        = string
  description = "Secrets Manager ARN of the SCRAM credential the DAGs use for offset lookups (a user whose Kafka ACLs only Describe)."
}

variable "kafka_secret_kms_key_arn" {
  type        = string
  description = "KMS key encrypting the SCRAM credential."
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource."
  default     = {}
}
