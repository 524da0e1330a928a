variable "name" {
  type        = string
  description = "Replication group ID, also the prefix of the AUTH secret, log group and KMS alias (at most 40 characters)."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,39}$", var.name))
    error_message = "name must start with a letter and hold at most 40 lowercase letters, digits or hyphens."
  }
}

variable "engine" {
  type        = string
  description = "Cache engine: \"redis\" (Redis OSS) or \"valkey\" (protocol-compatible, cheaper per node-hour)."
  default     = "redis"

  validation {
    condition     = contains(["redis", "valkey"], var.engine)
    error_message = "engine must be \"redis\" or \"valkey\"."
  }
}

variable "engine_version" {
  type        = string
  description = "Engine version, e.g. \"7.1\" for redis or \"8.0\" for valkey."
  default     = "7.1"
}

variable "parameter_group_name" {
  type        = string
  description = "Parameter group; must match engine and version (default.redis7, default.valkey8, ...)."
  default     = "default.redis7"
}

variable "node_type" {
  type        = string
  description = "Cache node type, e.g. cache.r7g.large (prod) or cache.t4g.small (staging)."
  default     = "cache.r7g.large"
}

variable "num_cache_clusters" {
  type        = number
  description = "Nodes in the group: one primary plus replicas; two or more enable Multi-AZ automatic failover."
  default     = 2

  validation {
    condition     = var.num_cache_clusters >= 1 && var.num_cache_clusters <= 6
    error_message = "num_cache_clusters must be between 1 and 6."
  }
}

variable "port" {
  type        = number
  description = "TCP port of the Redis endpoint."
  default     = 6379
}

variable "subnet_ids" {
  type        = list(string)
  description = "Private subnets for the cache nodes."
}

variable "security_group_ids" {
  type        = list(string)
  description = "Security groups of the cache nodes (the network module's redis group)."
}

variable "auth_token_update_strategy" {
  type        = string
  description = "How a changed AUTH token is applied: ROTATE keeps the old token valid until a later SET (zero-downtime rotation)."
  default     = "ROTATE"

  validation {
    condition     = contains(["ROTATE", "SET"], var.auth_token_update_strategy)
    error_message = "auth_token_update_strategy must be ROTATE or SET."
  }
}

variable "credential_rotation" {
  type        = number
  description = "Generation of the AUTH token; change it (e.g. increment) to generate and store a new token."
  default     = 1
}

variable "secret_recovery_window_days" {
  type        = number
  description = "Days a deleted AUTH secret can be restored (0 deletes at once; 7-30 otherwise)."
  default     = 30
}

variable "snapshot_retention_limit" {
  type        = number
  description = "Days of automatic snapshots to keep (summaries can be rebuilt by replay, snapshots make that rare)."
  default     = 7
}

variable "snapshot_window" {
  type        = string
  description = "Daily UTC window for snapshots, hh24:mi-hh24:mi."
  default     = "03:00-04:00"
}

variable "maintenance_window" {
  type        = string
  description = "Weekly UTC maintenance window, ddd:hh24:mi-ddd:hh24:mi (must not overlap the snapshot window)."
  default     = "sun:05:00-sun:06:00"
}

variable "apply_immediately" {
  type        = bool
  description = "Apply modifications at once instead of in the next maintenance window (token rotation needs true)."
  default     = true
}

variable "log_retention_days" {
  type        = number
  description = "Retention of the slow-log group, in days."
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
