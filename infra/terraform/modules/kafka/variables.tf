variable "name" {
  type        = string
  description = "Cluster name, also the prefix of the SCRAM secret, log group and KMS alias."
}

variable "kafka_version" {
  type        = string
  description = "Apache Kafka version MSK runs, e.g. \"3.9.x\"."
  default     = "3.9.x"
}

variable "broker_count" {
  type        = number
  description = "Number of broker nodes; a multiple of the number of subnets (one broker per AZ with three AZs)."
  default     = 3
}

variable "broker_instance_type" {
  type        = string
  description = "MSK broker instance type, e.g. kafka.m7g.large (prod) or kafka.t3.small (staging)."
  default     = "kafka.m7g.large"
}

variable "broker_volume_size" {
  type        = number
  description = "EBS storage per broker in GiB; size for retention (7 days of rsvps.raw) x replication factor / brokers."
  default     = 100
}

variable "subnet_ids" {
  type        = list(string)
  description = "Private subnets for the broker ENIs, one per AZ."
}

variable "security_group_ids" {
  type        = list(string)
  description = "Security groups of the broker ENIs (the network module's kafka group)."
}

variable "enhanced_monitoring" {
  type        = string
  description = "MSK CloudWatch metric level: DEFAULT, PER_BROKER, PER_TOPIC_PER_BROKER or PER_TOPIC_PER_PARTITION."
  default     = "PER_TOPIC_PER_BROKER"

  validation {
    condition     = contains(["DEFAULT", "PER_BROKER", "PER_TOPIC_PER_BROKER", "PER_TOPIC_PER_PARTITION"], var.enhanced_monitoring)
    error_message = "enhanced_monitoring must be DEFAULT, PER_BROKER, PER_TOPIC_PER_BROKER or PER_TOPIC_PER_PARTITION."
  }
}

variable "allow_everyone_if_no_acl_found" {
  type        = bool
  description = "Broker setting allow.everyone.if.no.acl.found. True lets the single SCRAM user reach topics without Kafka ACLs; set false once ACLs for the SCRAM user exist (IAM clients are authorised by IAM either way)."
  default     = true
}

variable "server_properties" {
  type        = map(string)
  description = "Extra broker properties merged over the module's defaults."
  default     = {}
}

variable "scram_username" {
  type        = string
  description = "SASL/SCRAM user name of the kappa jobs (not secret; the password is generated)."
  default     = "kappa"

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,64}$", var.scram_username))
    error_message = "scram_username must be 1-64 letters, digits, underscores or hyphens."
  }
}

variable "credential_rotation" {
  type        = number
  description = "Generation of the SCRAM password; change it (e.g. increment) to generate and store a new password."
  default     = 1
}

variable "secret_recovery_window_days" {
  type        = number
  description = "Days a deleted SCRAM secret can be restored (0 deletes at once; 7-30 otherwise)."
  default     = 30
}

variable "log_retention_days" {
  type        = number
  description = "Retention of the broker log group, in days."
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
