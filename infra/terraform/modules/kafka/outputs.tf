output "cluster_arn" {
  description = "ARN of the MSK cluster."
  value       = aws_msk_cluster.this.arn
}

output "cluster_name" {
  description = "Name of the MSK cluster."
  value       = aws_msk_cluster.this.cluster_name
}

output "cluster_uuid" {
  description = "UUID of the MSK cluster (part of its topic and group ARNs)."
  value       = aws_msk_cluster.this.cluster_uuid
}

output "bootstrap_brokers_sasl_scram" {
  description = "Comma-separated host:9096 pairs for SASL_SSL with SCRAM-SHA-512."
  value       = aws_msk_cluster.this.bootstrap_brokers_sasl_scram
}

output "bootstrap_brokers_sasl_iam" {
  description = "Comma-separated host:9098 pairs for SASL_SSL with IAM (OAUTHBEARER/AWS_MSK_IAM)."
  value       = aws_msk_cluster.this.bootstrap_brokers_sasl_iam
}

output "scram_secret_arn" {
  description = "Secrets Manager ARN of the SCRAM credential ({\"username\", \"password\"} JSON)."
  value       = aws_secretsmanager_secret.scram.arn
}

output "kms_key_arn" {
  description = "KMS key of the cluster data, the SCRAM secret and broker logs (readers of the secret need kms:Decrypt on it)."
  value       = module.kms.key_arn
}

output "topic_arn_prefix" {
  description = "Prefix of this cluster's topic ARNs; append a topic name or pattern."
  value       = "${local.arn_base}:topic/${local.resource_suffix}"
}

output "group_arn_prefix" {
  description = "Prefix of this cluster's consumer-group ARNs; append a group name or pattern."
  value       = "${local.arn_base}:group/${local.resource_suffix}"
}

output "transactional_id_arn_prefix" {
  description = "Prefix of this cluster's transactional-id ARNs; append an id or pattern."
  value       = "${local.arn_base}:transactional-id/${local.resource_suffix}"
}
