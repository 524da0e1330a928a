output "environment_arn" {
  description = "ARN of the MWAA environment."
  value       = aws_mwaa_environment.this.arn
}

output "webserver_url" {
  description = "https:// URL of the Airflow UI and REST API."
  value       = "https://${aws_mwaa_environment.this.webserver_url}"
}

output "dags_uri" {
  description = "s3:// URI the DAG files are synced to."
  value       = "s3://${var.dags_bucket_name}/${var.dag_s3_path}"
}

output "execution_role_arn" {
  description = "Execution role of the environment."
  value       = aws_iam_role.execution.arn
}
