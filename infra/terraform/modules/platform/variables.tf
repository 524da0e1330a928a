# What sets one environment apart from another: its name, network, sizes and how much it keeps on
# destroy. These have no default, so every environment root states them. The rest (topics, SCRAM
# users, credential generations, the ACL migration switch) is the same everywhere by default.

variable "environment" {
  type        = string
  description = "Environment name; resources are named kappa-<environment>, and environments/<environment>-acls finds the MSK cluster by that name."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,20}$", var.environment))
    error_message = "environment must be 2-21 lowercase letters, digits or hyphens (it is part of bucket names)."
  }
}

variable "availability_zones" {
  type        = list(string)
  description = "Three availability zones of the provider's region, one MSK broker and one private subnet in each."

  validation {
    condition     = length(var.availability_zones) == 3
    error_message = "availability_zones must name three zones: the three MSK brokers are spread one per zone, and MWAA uses the first two."
  }
}

variable "vpc_cidr" {
  type        = string
  description = "IPv4 CIDR of the platform VPC (must not overlap networks peered with it, nor another environment's)."
}

variable "single_nat_gateway" {
  type        = bool
  description = "One NAT gateway for all AZs (cheaper) instead of one per AZ (survives an AZ outage)."
}

variable "vpc_interface_endpoints" {
  type        = list(string)
  description = "AWS APIs reached through interface endpoints (about 7 USD a month per AZ each); the rest go through NAT."
}

variable "allow_destroy_with_data" {
  type        = bool
  description = "Let terraform destroy delete non-empty buckets and the lock table: true only for a disposable environment."
}

variable "kms_deletion_window_days" {
  type        = number
  description = "Waiting period before deleted KMS keys are destroyed (7-30 days)."
}

variable "secret_recovery_window_days" {
  type        = number
  description = "Days deleted secrets stay recoverable (0 or 7-30)."
}

variable "kafka_broker_instance_type" {
  type        = string
  description = "MSK broker instance type (three brokers)."
}

variable "kafka_broker_volume_size" {
  type        = number
  description = "EBS GiB per broker."
}

variable "redis_node_type" {
  type        = string
  description = "ElastiCache node type (two nodes: primary and replica)."
}

variable "spark_maximum_capacity" {
  type = object({
    cpu    = string
    memory = string
    disk   = string
  })
  description = "Ceiling on what all Spark jobs together may hold on EMR Serverless."
}

variable "mwaa_environment_class" {
  type        = string
  description = "MWAA environment class."
}

variable "mwaa_max_workers" {
  type        = number
  description = "Most workers MWAA scales to."
}

variable "mwaa_requirements_txt" {
  type        = string
  description = "Content of MWAA's requirements.txt (the root's mwaa-requirements.txt), uploaded and pinned by S3 object version."
}

variable "mwaa_webserver_access_mode" {
  type        = string
  description = "PRIVATE_ONLY or PUBLIC_ONLY access to the Airflow UI."
  default     = "PRIVATE_ONLY"
}

variable "kafka_topics" {
  type        = list(string)
  description = "Platform topics (conf/base.yaml): the Spark jobs read and write them, the DAGs describe them. Keep in step with modules/platform-acls."
  default     = ["rsvps.raw", "rsvps.analyzed", "rsvps.summaries", "rsvps.dlq", "platform.metrics", "platform.errors"]
}

variable "kafka_scram_users" {
  type        = list(string)
  description = "One MSK SCRAM user (and AmazonMSK_ secret) per workload; each needs its grants in modules/platform-acls (kafka_workloads), or it reaches nothing. streaming, loader, airflow and operator are wired in main.tf."
  default     = ["collector", "streaming", "loader", "airflow", "operator"]

  validation {
    condition     = alltrue([for user in ["streaming", "loader", "airflow", "operator"] : contains(var.kafka_scram_users, user)])
    error_message = "kafka_scram_users must include streaming, loader, airflow and operator: main.tf hands their secrets to the Spark job role, MWAA and the Kafka admin policy."
  }
}

variable "kafka_allow_everyone_if_no_acl_found" {
  type        = bool
  description = "Broker setting allow.everyone.if.no.acl.found. False: a SCRAM user reaches only what its Kafka ACLs grant. True only for a migration window (runbook), never as a fix for a missing ACL."
  default     = false
}

variable "kafka_scram_rotation" {
  type        = number
  description = "Generation of every MSK SCRAM password; increment to rotate all users (docs/runbooks/terraform.md)."
  default     = 1
}

variable "kafka_scram_user_rotation" {
  type        = map(number)
  description = "Per-user SCRAM password generation, keyed by user; increment one entry to rotate only that user (docs/runbooks/terraform.md)."
  default     = {}
}

variable "redis_auth_rotation" {
  type        = number
  description = "Generation of the Redis AUTH token; increment to rotate (docs/runbooks/terraform.md)."
  default     = 1
}
