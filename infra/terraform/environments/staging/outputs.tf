# The same outputs as environments/prod, forwarded from modules/platform: every ${terraform:NAME}
# placeholder in conf/prod.yaml names one of them, so a staging outputs.json drives the same config.
# None of them is a secret.
# `terraform output -json > outputs.json; export KAPPA_TERRAFORM_OUTPUTS=outputs.json`

output "kafka_bootstrap_servers" {
  description = "MSK brokers for SASL_SSL + SCRAM-SHA-512 (host:9096,...) -> kafka.bootstrap_servers."
  value       = module.platform.kafka_bootstrap_servers
}

output "kafka_sasl_secret_arn" {
  description = "Secrets Manager ARN of the streaming job's SCRAM credential (user streaming) -> kafka.sasl_secret_arn; other workloads override it with theirs from kafka_sasl_secret_arns."
  value       = module.platform.kafka_sasl_secret_arn
}

output "redis_host" {
  description = "ElastiCache primary endpoint -> redis.host."
  value       = module.platform.redis_host
}

output "redis_port" {
  description = "ElastiCache port (TLS) -> redis.port."
  value       = module.platform.redis_port
}

output "redis_auth_secret_arn" {
  description = "Secrets Manager ARN of the Redis AUTH token -> redis.auth_secret_arn."
  value       = module.platform.redis_auth_secret_arn
}

output "spark_application_id" {
  description = "EMR Serverless application ID -> spark.emr_application_id."
  value       = module.platform.spark_application_id
}

output "spark_job_role_arn" {
  description = "Job runtime role for StartJobRun -> spark.job_role_arn."
  value       = module.platform.spark_job_role_arn
}

output "spark_artifacts_uri" {
  description = "s3:// URI of job code and config -> spark.artifacts_uri."
  value       = module.platform.spark_artifacts_uri
}

output "lake_root" {
  description = "s3:// URI under which the Delta tables live -> lake.root."
  value       = module.platform.lake_root
}

output "checkpoint_root" {
  description = "s3:// URI of the streaming checkpoints -> lake.checkpoint_root."
  value       = module.platform.checkpoint_root
}

output "airflow_dags_uri" {
  description = "s3:// URI the DAGs are synced to -> airflow.dags_uri."
  value       = module.platform.airflow_dags_uri
}

output "airflow_webserver_url" {
  description = "https:// URL of the Airflow UI and API -> airflow.webserver_url."
  value       = module.platform.airflow_webserver_url
}

output "kafka_bootstrap_servers_iam" {
  description = "MSK brokers for SASL_SSL + IAM (host:9098,...), for clients that authenticate with their role."
  value       = module.platform.kafka_bootstrap_servers_iam
}

output "delta_lock_table_name" {
  description = "DynamoDB table for delta-rs commit locking on S3 (DELTA_DYNAMO_TABLE_NAME)."
  value       = module.platform.delta_lock_table_name
}

output "kafka_sasl_secret_arns" {
  description = "Secrets Manager ARN of each workload's SCRAM credential, keyed by SCRAM user (collector, streaming, loader, airflow, operator); a launcher sets KAPPA_KAFKA__SASL_SECRET_ARN to its workload's."
  value       = module.platform.kafka_sasl_secret_arns
}

output "kafka_admin_security_group_id" {
  description = "Security group to attach to the CI runner or bastion that applies environments/<env>-acls and runs `kappa topics apply` (reaches the brokers on 9096/9098)."
  value       = module.platform.kafka_admin_security_group_id
}

output "kafka_admin_policy_arn" {
  description = "IAM policy to attach to that runner's role: Kafka ACL administration over IAM on this cluster, and the operator's SCRAM secret."
  value       = module.platform.kafka_admin_policy_arn
}
