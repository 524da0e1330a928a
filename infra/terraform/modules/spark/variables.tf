variable "name" {
  type        = string
  description = "Name of the EMR Serverless application, also the prefix of its role, log group and KMS alias."
}

variable "release_label" {
  type        = string
  description = "EMR release; must ship Spark 4 (emr-spark-8.0.0 ships Spark 4.0.2 and Delta 4.0, see the README on versions)."
  default     = "emr-spark-8.0.0"
}

variable "architecture" {
  type        = string
  description = "Worker CPU architecture: ARM64 (Graviton, about 20% cheaper per vCPU-hour) or X86_64."
  default     = "ARM64"

  validation {
    condition     = contains(["ARM64", "X86_64"], var.architecture)
    error_message = "architecture must be ARM64 or X86_64."
  }
}

variable "maximum_capacity" {
  type = object({
    cpu    = string
    memory = string
    disk   = string
  })
  description = "Ceiling on the resources all running jobs may hold together; the cost guard-rail of the application."
  default = {
    cpu    = "48 vCPU"
    memory = "192 GB"
    disk   = "1000 GB"
  }
}

variable "initial_capacity" {
  type = map(object({
    worker_count = number
    cpu          = string
    memory       = string
  }))
  description = "Pre-initialised workers keyed by type (Driver, Executor); billed while the application is started. Empty: cold start on submit."
  default     = {}

  validation {
    condition     = alltrue([for key in keys(var.initial_capacity) : contains(["Driver", "Executor"], key)])
    error_message = "initial_capacity keys must be Driver or Executor."
  }
}

variable "idle_timeout_minutes" {
  type        = number
  description = "Minutes without running jobs after which the application stops (and stops billing pre-initialised capacity)."
  default     = 15
}

variable "image_uri" {
  type        = string
  description = "Custom ECR image with the jobs' Python dependencies (confluent-kafka, deltalake, redis), or null for the stock image plus --archives."
  default     = null
}

variable "subnet_ids" {
  type        = list(string)
  description = "Private subnets the workers' ENIs are placed in (they reach MSK and Redis there)."
}

variable "security_group_ids" {
  type        = list(string)
  description = "Security groups of the workers (the network module's spark group)."
}

variable "artifacts_bucket_name" {
  type        = string
  description = "Bucket holding job code, config and event logs."
}

variable "artifacts_bucket_arn" {
  type        = string
  description = "ARN of the artifacts bucket."
}

variable "artifacts_prefix" {
  type        = string
  description = "Key prefix of job code and config in the artifacts bucket (read-only for the jobs)."
  default     = "jobs"
}

variable "event_logs_prefix" {
  type        = string
  description = "Key prefix of Spark event logs in the artifacts bucket (written by the jobs)."
  default     = "spark-logs"
}

variable "tables_bucket_arn" {
  type        = string
  description = "ARN of the bucket holding the Delta tables."
}

variable "tables_prefix" {
  type        = string
  description = "Key prefix of the Delta tables (read-write for the jobs)."
}

variable "checkpoints_bucket_arn" {
  type        = string
  description = "ARN of the bucket holding streaming checkpoints."
}

variable "checkpoints_prefix" {
  type        = string
  description = "Key prefix of the streaming checkpoints (read-write for the jobs)."
}

variable "lake_kms_key_arn" {
  type        = string
  description = "KMS key of the lake buckets and the Delta lock table."
}

variable "delta_lock_table_arn" {
  type        = string
  description = "ARN of the DynamoDB table delta-rs locks commits with, or null when not used."
  default     = null
}

variable "secret_arns" {
  type        = list(string)
  description = "Secrets the jobs read at start: the SCRAM credentials of the workloads that run here (streaming, loader) and the Redis AUTH token."
}

variable "secret_kms_key_arns" {
  type        = list(string)
  description = "KMS keys encrypting those secrets."
}

variable "kafka_cluster_arn" {
  type        = string
  description = "ARN of the MSK cluster."
}

variable "kafka_topic_arn_prefix" {
  type        = string
  description = "Topic ARN prefix of the MSK cluster (kafka module output topic_arn_prefix)."
}

variable "kafka_group_arn_prefix" {
  type        = string
  description = "Consumer-group ARN prefix of the MSK cluster (kafka module output group_arn_prefix)."
}

variable "kafka_transactional_id_arn_prefix" {
  type        = string
  description = "Transactional-id ARN prefix of the MSK cluster (kafka module output transactional_id_arn_prefix)."
}

variable "kafka_topics" {
  type        = list(string)
  description = "Topics the jobs read and write (conf/base.yaml topics)."
  default     = ["rsvps.raw", "rsvps.analyzed", "rsvps.summaries", "rsvps.dlq", "platform.metrics", "platform.errors"]
}

variable "kafka_client_prefix" {
  type        = string
  description = "Prefix of the consumer group and transactional ids the jobs use; IAM grants only those."
  default     = "kappa-"
}

variable "log_retention_days" {
  type        = number
  description = "Retention of the job log group, in days."
  default     = 365
}

variable "kms_deletion_window_days" {
  type        = number
  description = "Waiting period before a deleted KMS key is destroyed (7-30 days)."
  default     = 30
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource."
  default     = {}
}
