variable "workloads" {
  type = map(object({
    topics              = optional(map(list(string)), {})
    groups              = optional(map(list(string)), {})
    idempotent_producer = optional(bool, true)
  }))
  description = <<-EOT
    What each SCRAM user (the map key, principal User:<key>) may do. `topics` maps an access kind
    to exact topic names: consume (Read, Describe), produce (Write, Describe), describe (Describe),
    manage (Create, Alter, AlterConfigs, DescribeConfigs, Describe: `kappa topics apply`).
    `groups` maps consume (Read) or describe (Describe) to consumer-group id prefixes.
    A user that produces with `idempotent_producer` also gets IdempotentWrite on the cluster.
  EOT

  validation {
    condition = alltrue([
      for workload in values(var.workloads) :
      alltrue([for access in keys(workload.topics) : contains(["consume", "produce", "describe", "manage"], access)]) &&
      alltrue([for access in keys(workload.groups) : contains(["consume", "describe"], access)])
    ])
    error_message = "topics access kinds are consume, produce, describe and manage; groups access kinds are consume and describe."
  }

  validation {
    condition = alltrue([
      for workload in values(var.workloads) :
      alltrue([for topic in flatten(values(workload.topics)) : contains(var.topics, topic)])
    ])
    error_message = "Every topic a workload is granted must be one of var.topics (exact names, no wildcards)."
  }

  validation {
    condition = alltrue([
      for workload in values(var.workloads) :
      alltrue([for prefix in flatten(values(workload.groups)) : can(regex("^[A-Za-z0-9._-]{4,}$", prefix))])
    ])
    error_message = "Group prefixes are at least 4 letters, digits, dots, underscores or hyphens (no '*', never empty: an empty prefix matches every group)."
  }

  validation {
    condition     = alltrue([for user in keys(var.workloads) : can(regex("^[A-Za-z0-9_-]{1,64}$", user))])
    error_message = "Workload keys are SCRAM user names: 1-64 letters, digits, underscores or hyphens."
  }
}

variable "topics" {
  type        = list(string)
  description = "The platform's topics (conf/base.yaml); workloads may be granted only these, by exact name."

  validation {
    condition     = alltrue([for topic in var.topics : can(regex("^[A-Za-z0-9._-]+$", topic))])
    error_message = "Topic names are letters, digits, dots, underscores or hyphens (no '*')."
  }
}
