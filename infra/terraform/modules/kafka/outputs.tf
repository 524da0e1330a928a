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

output "scram_secret_arns" {
  description = "Secrets Manager ARN of each SCRAM user's credential ({\"username\", \"password\"} JSON), keyed by user name."
  value       = { for user, secret in aws_secretsmanager_secret.scram : user => secret.arn }
}

output "scram_usernames" {
  description = "The SCRAM user names; the Kafka ACL principal of each is User:<name>."
  value       = sort(var.scram_users)
}

output "admin_policy_arn" {
  description = "IAM policy for the host that applies the Kafka ACLs and creates topics (null when create_admin_policy is false)."
  value       = one(aws_iam_policy.admin[*].arn)
}

output "kms_key_arn" {
  description = "KMS key of the cluster data, the SCRAM secrets and broker logs (readers of a secret need kms:Decrypt on it)."
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
