variable "name" {
  type        = string
  description = "Name prefix of the buckets, e.g. \"kappa-prod\"; the account ID is appended for global uniqueness."

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{1,26}$", var.name))
    error_message = "name must be 2-27 lowercase letters, digits or hyphens (bucket names are at most 63 characters)."
  }
}

variable "tables_prefix" {
  type        = string
  description = "Key prefix under which the Delta tables live in the tables bucket (the lake root)."
  default     = "delta"
}

variable "checkpoints_prefix" {
  type        = string
  description = "Key prefix under which streaming checkpoints live in the checkpoints bucket."
  default     = "checkpoints"
}

variable "noncurrent_version_retention_days" {
  type = object({
    tables      = number
    checkpoints = number
    artifacts   = number
    dags        = number
  })
  description = "Days a deleted or overwritten object version is kept per bucket before expiry (the undo window after VACUUM or a checkpoint reset)."
  default = {
    tables      = 30
    checkpoints = 7
    artifacts   = 90
    dags        = 90
  }
}

variable "enable_access_logging" {
  type        = bool
  description = "Log S3 server access of every lake bucket to a dedicated access-log bucket."
  default     = true
}

variable "access_log_retention_days" {
  type        = number
  description = "Days S3 access logs are kept."
  default     = 365
}

variable "create_delta_lock_table" {
  type        = bool
  description = "Create the DynamoDB table delta-rs uses to serialise commits on S3 (AWS_S3_LOCKING_PROVIDER=dynamodb)."
  default     = true
}

variable "force_destroy" {
  type        = bool
  description = "Allow destroying non-empty buckets and the lock table (staging only; never in prod)."
  default     = false
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
