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
  description = "Broker setting allow.everyone.if.no.acl.found. False (the default): a SCRAM user reaches only what a Kafka ACL grants it (modules/kafka-acls). True lets every SCRAM user reach any resource without ACLs; only for a migration window. IAM clients are authorised by IAM either way."
  default     = false
}

variable "server_properties" {
  type        = map(string)
  description = "Extra broker properties merged over the module's defaults (not allow.everyone.if.no.acl.found: that has its own variable)."
  default     = {}

  validation {
    condition     = !contains(keys(var.server_properties), "allow.everyone.if.no.acl.found")
    error_message = "Set allow.everyone.if.no.acl.found through allow_everyone_if_no_acl_found, not server_properties."
  }
}

variable "scram_users" {
  type        = list(string)
  description = "SASL/SCRAM user names, one per workload (e.g. collector, streaming, loader); each gets a generated password in its own AmazonMSK_<name>_<user> secret, and is the Kafka ACL principal User:<user>."

  validation {
    condition     = length(var.scram_users) > 0 && length(distinct(var.scram_users)) == length(var.scram_users) && alltrue([for user in var.scram_users : can(regex("^[A-Za-z0-9_-]{1,64}$", user))])
    error_message = "scram_users must be distinct names of 1-64 letters, digits, underscores or hyphens."
  }
}

variable "credential_rotation" {
  type        = number
  description = "Generation of every SCRAM password; change it (e.g. increment) to generate and store new passwords for all users."
  default     = 1
}

variable "user_credential_rotation" {
  type        = map(number)
  description = "Per-user generation on top of credential_rotation, keyed by SCRAM user; increment one entry to rotate only that user's password (e.g. a leaked one)."
  default     = {}
}

variable "create_admin_policy" {
  type        = bool
  description = "Create an IAM policy for the host that administers Kafka: Kafka ACLs over IAM (Connect, DescribeCluster, AlterCluster on this cluster), finding the brokers, and reading the admin_scram_users secrets."
  default     = true
}

variable "admin_scram_users" {
  type        = list(string)
  description = "SCRAM users whose secrets the admin policy may read (the topic operator's, for `kappa topics apply`); each must be in scram_users."
  default     = []

  validation {
    condition     = alltrue([for user in var.admin_scram_users : contains(var.scram_users, user)])
    error_message = "Every admin_scram_users entry must be one of scram_users."
  }
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
