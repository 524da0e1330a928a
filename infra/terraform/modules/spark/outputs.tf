output "application_id" {
  description = "ID of the EMR Serverless application (StartJobRun --application-id)."
  value       = aws_emrserverless_application.this.id
}

output "application_arn" {
  description = "ARN of the EMR Serverless application."
  value       = aws_emrserverless_application.this.arn
}

output "job_role_arn" {
  description = "Job runtime role (StartJobRun --execution-role-arn)."
  value       = aws_iam_role.job.arn
}

output "artifacts_uri" {
  description = "s3:// URI the job code and config are uploaded to and read from."
  value       = local.artifacts_uri
}

output "event_logs_uri" {
  description = "s3:// URI of the Spark event logs."
  value       = local.event_logs_uri
}

output "log_group_name" {
  description = "CloudWatch log group of the job drivers and executors."
  value       = aws_cloudwatch_log_group.this.name
}
