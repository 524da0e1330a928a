output "kafka_principals" {
  description = "Kafka principals granted anything (User:<SCRAM user>); each must be a SCRAM user of modules/platform (its kafka_sasl_secret_arns)."
  value       = module.kafka_acls.principals
}

output "kafka_acls" {
  description = "Every ACL granted, one line each (principal, operation, resource)."
  value       = module.kafka_acls.acls
}
