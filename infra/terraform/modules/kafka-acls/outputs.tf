output "principals" {
  description = "The Kafka principals (User:<SCRAM user>) this module grants anything to."
  value       = sort([for user in keys(var.workloads) : "User:${user}"])
}

output "acls" {
  description = "Every ACL granted, one readable line each: principal, operation, resource type and name (a group name is a prefix)."
  value = sort(concat(
    [for acl in values(kafka_acl.this) : "${acl.acl_principal} ${acl.acl_operation} Topic:${acl.resource_name}"],
    [for acl in values(kafka_acl.group) : "${acl.acl_principal} ${acl.acl_operation} Group(prefix):${acl.resource_name}"],
    [for acl in values(kafka_acl.cluster) : "${acl.acl_principal} ${acl.acl_operation} Cluster:${acl.resource_name}"],
  ))
}
