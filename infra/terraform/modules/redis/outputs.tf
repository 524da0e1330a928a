output "replication_group_id" {
  description = "ID of the replication group."
  value       = aws_elasticache_replication_group.this.id
}

output "primary_endpoint_address" {
  description = "DNS name of the primary node (reads and writes; follows failover)."
  value       = aws_elasticache_replication_group.this.primary_endpoint_address
}

output "reader_endpoint_address" {
  description = "DNS name spreading reads over the replicas."
  value       = aws_elasticache_replication_group.this.reader_endpoint_address
}

output "port" {
  description = "TCP port of the endpoints (TLS required)."
  value       = aws_elasticache_replication_group.this.port
}

output "auth_secret_arn" {
  description = "Secrets Manager ARN of the AUTH token ({\"password\"} JSON)."
  value       = aws_secretsmanager_secret.auth.arn
}

output "kms_key_arn" {
  description = "KMS key of the cache data and the AUTH secret (readers of the secret need kms:Decrypt on it)."
  value       = module.kms.key_arn
}
