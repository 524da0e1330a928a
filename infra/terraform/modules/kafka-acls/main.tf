# Kafka ACLs for the SCRAM users of the kafka module: each workload gets exactly the operations
# its access kinds stand for, on exact topic names and on its own consumer-group prefixes, and
# nothing else. With allow.everyone.if.no.acl.found = false on the brokers, whatever is not
# granted here is denied. Principals are User:<SCRAM user name>; the host is "*" because the
# clients' addresses are not stable (EMR Serverless and MWAA ENIs), so the security groups
# decide who reaches the brokers at all.
#
# The kafka provider must reach the brokers: apply from inside the VPC (environments/<env>-acls,
# docs/runbooks/terraform.md).

locals {
  # The only operations this module grants, per access kind. Never All: every grant is named.
  topic_operations = {
    consume  = ["Read", "Describe"]
    produce  = ["Write", "Describe"]
    describe = ["Describe"]
    manage   = ["Create", "Alter", "AlterConfigs", "DescribeConfigs", "Describe"]
  }
  group_operations = {
    consume  = ["Read"]
    describe = ["Describe"]
  }

  topic_acls = {
    for acl in distinct(flatten([
      for user, workload in var.workloads : [
        for access, topics in workload.topics : [
          for topic in topics : [
            for operation in local.topic_operations[access] : { user = user, name = topic, operation = operation }
          ]
        ]
      ]
    ])) : "${acl.user}|${acl.name}|${acl.operation}" => acl
  }

  group_acls = {
    for acl in distinct(flatten([
      for user, workload in var.workloads : [
        for access, prefixes in workload.groups : [
          for prefix in prefixes : [
            for operation in local.group_operations[access] : { user = user, name = prefix, operation = operation }
          ]
        ]
      ]
    ])) : "${acl.user}|${acl.name}|${acl.operation}" => acl
  }

  idempotent_producers = toset([
    for user, workload in var.workloads : user
    if workload.idempotent_producer && length(lookup(workload.topics, "produce", [])) > 0
  ])
}

# Topic ACLs: exact (Literal) names only.
resource "kafka_acl" "this" {
  for_each = local.topic_acls

  resource_name                = each.value.name
  resource_type                = "Topic"
  resource_pattern_type_filter = "Literal"
  acl_principal                = "User:${each.value.user}"
  acl_host                     = "*"
  acl_operation                = each.value.operation
  acl_permission_type          = "Allow"
}

# Consumer groups: the workload's own prefix (Spark and the loader derive unique group ids).
resource "kafka_acl" "group" {
  for_each = local.group_acls

  resource_name                = each.value.name
  resource_type                = "Group"
  resource_pattern_type_filter = "Prefixed"
  acl_principal                = "User:${each.value.user}"
  acl_host                     = "*"
  acl_operation                = each.value.operation
  acl_permission_type          = "Allow"
}

# Idempotent producers (enable.idempotence=true) may ask for a producer id. Nothing else is
# granted on the cluster resource (never ClusterAction: MSK's brokers are super users already).
resource "kafka_acl" "cluster" {
  for_each = local.idempotent_producers

  resource_name                = "kafka-cluster"
  resource_type                = "Cluster"
  resource_pattern_type_filter = "Literal"
  acl_principal                = "User:${each.value}"
  acl_host                     = "*"
  acl_operation                = "IdempotentWrite"
  acl_permission_type          = "Allow"
}
