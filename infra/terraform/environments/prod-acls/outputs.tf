output "kafka_principals" {
  description = "Kafka principals granted anything (User:<SCRAM user>); each must be a SCRAM user of the platform root (its kafka_sasl_secret_arns)."
  value       = module.platform_acls.kafka_principals
}

output "kafka_acls" {
  description = "Every ACL this root grants, one line each (principal, operation, resource)."
  value       = module.platform_acls.kafka_acls
}
