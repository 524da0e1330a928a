# Consumers get a bucket only once it is private, versioned and encrypted (MWAA needs the
# requirements.txt object to be written with a version ID).
output "bucket_names" {
  description = "Bucket name per purpose: tables, checkpoints, artifacts, dags."
  value       = { for key, bucket in aws_s3_bucket.this : key => bucket.id }

  depends_on = [
    aws_s3_bucket_public_access_block.this,
    aws_s3_bucket_versioning.this,
    aws_s3_bucket_server_side_encryption_configuration.this,
    aws_s3_bucket_policy.this,
  ]
}

output "bucket_arns" {
  description = "Bucket ARN per purpose: tables, checkpoints, artifacts, dags."
  value       = { for key, bucket in aws_s3_bucket.this : key => bucket.arn }

  depends_on = [
    aws_s3_bucket_public_access_block.this,
    aws_s3_bucket_versioning.this,
    aws_s3_bucket_server_side_encryption_configuration.this,
    aws_s3_bucket_policy.this,
  ]
}

output "access_log_bucket_name" {
  description = "Bucket receiving S3 server access logs, or null when access logging is off."
  value       = one(aws_s3_bucket.access_logs[*].id)
}

output "kms_key_arn" {
  description = "KMS key encrypting the lake buckets and the Delta lock table."
  value       = module.kms.key_arn
}

output "tables_prefix" {
  description = "Key prefix of the Delta tables in the tables bucket."
  value       = var.tables_prefix
}

output "checkpoints_prefix" {
  description = "Key prefix of the streaming checkpoints in the checkpoints bucket."
  value       = var.checkpoints_prefix
}

output "lake_root" {
  description = "s3:// URI under which the Delta tables live."
  value       = "s3://${aws_s3_bucket.this["tables"].id}/${var.tables_prefix}"
}

output "checkpoint_root" {
  description = "s3:// URI under which the streaming checkpoints live."
  value       = "s3://${aws_s3_bucket.this["checkpoints"].id}/${var.checkpoints_prefix}"
}

output "delta_lock_table_name" {
  description = "DynamoDB table for delta-rs commit locking (DELTA_DYNAMO_TABLE_NAME), or null."
  value       = one(aws_dynamodb_table.delta_log[*].name)
}

output "delta_lock_table_arn" {
  description = "ARN of the Delta commit lock table, or null."
  value       = one(aws_dynamodb_table.delta_log[*].arn)
}
