# The kappa platform in one environment: network, lake, Kafka (MSK), Redis (ElastiCache), Spark
# (EMR Serverless) and Airflow (MWAA), wired to each other. A composition module: it declares no
# resources of its own, only calls the component modules (each creates its own KMS key through
# modules/kms). Every environment root (environments/prod, environments/staging) calls it once
# with that environment's sizes and switches; the wiring below is the same for all of them.

locals {
  name = "kappa-${var.environment}"

  # Consumer groups and transactional ids of the kappa jobs start with this; IAM grants no others.
  kafka_client_prefix = "kappa-"

  # SCRAM users (kafka_scram_users) whose secrets this module hands out: the Spark job role runs
  # the streaming job and the loader, MWAA looks up offsets, the operator host creates topics.
  # Their Kafka ACLs live in modules/platform-acls (applied by environments/<env>-acls).
  kafka_spark_users   = ["streaming", "loader"]
  kafka_airflow_user  = "airflow"
  kafka_operator_user = "operator"
}

module "network" {
  source = "../network"

  name                     = local.name
  cidr_block               = var.vpc_cidr
  azs                      = var.availability_zones
  single_nat_gateway       = var.single_nat_gateway
  interface_endpoints      = var.vpc_interface_endpoints
  kms_deletion_window_days = var.kms_deletion_window_days
}

module "lake" {
  source = "../lake"

  name                     = local.name
  force_destroy            = var.allow_destroy_with_data
  kms_deletion_window_days = var.kms_deletion_window_days
}

module "kafka" {
  source = "../kafka"

  name                           = local.name
  broker_instance_type           = var.kafka_broker_instance_type
  broker_volume_size             = var.kafka_broker_volume_size
  subnet_ids                     = module.network.private_subnet_ids
  security_group_ids             = [module.network.kafka_security_group_id]
  scram_users                    = var.kafka_scram_users
  admin_scram_users              = [local.kafka_operator_user]
  allow_everyone_if_no_acl_found = var.kafka_allow_everyone_if_no_acl_found
  credential_rotation            = var.kafka_scram_rotation
  user_credential_rotation       = var.kafka_scram_user_rotation
  secret_recovery_window_days    = var.secret_recovery_window_days
  kms_deletion_window_days       = var.kms_deletion_window_days
}

module "redis" {
  source = "../redis"

  name                        = local.name
  node_type                   = var.redis_node_type
  subnet_ids                  = module.network.private_subnet_ids
  security_group_ids          = [module.network.redis_security_group_id]
  credential_rotation         = var.redis_auth_rotation
  secret_recovery_window_days = var.secret_recovery_window_days
  kms_deletion_window_days    = var.kms_deletion_window_days
}

module "spark" {
  source = "../spark"

  name               = local.name
  maximum_capacity   = var.spark_maximum_capacity
  subnet_ids         = module.network.private_subnet_ids
  security_group_ids = [module.network.spark_security_group_id]

  artifacts_bucket_name  = module.lake.bucket_names["artifacts"]
  artifacts_bucket_arn   = module.lake.bucket_arns["artifacts"]
  tables_bucket_arn      = module.lake.bucket_arns["tables"]
  tables_prefix          = module.lake.tables_prefix
  checkpoints_bucket_arn = module.lake.bucket_arns["checkpoints"]
  checkpoints_prefix     = module.lake.checkpoints_prefix
  lake_kms_key_arn       = module.lake.kms_key_arn
  delta_lock_table_arn   = module.lake.delta_lock_table_arn

  secret_arns         = concat([for user in local.kafka_spark_users : module.kafka.scram_secret_arns[user]], [module.redis.auth_secret_arn])
  secret_kms_key_arns = [module.kafka.kms_key_arn, module.redis.kms_key_arn]

  kafka_cluster_arn                 = module.kafka.cluster_arn
  kafka_topic_arn_prefix            = module.kafka.topic_arn_prefix
  kafka_group_arn_prefix            = module.kafka.group_arn_prefix
  kafka_transactional_id_arn_prefix = module.kafka.transactional_id_arn_prefix
  kafka_topics                      = var.kafka_topics
  kafka_client_prefix               = local.kafka_client_prefix

  kms_deletion_window_days = var.kms_deletion_window_days
}

module "airflow" {
  source = "../airflow"

  name                  = local.name
  environment_class     = var.mwaa_environment_class
  max_workers           = var.mwaa_max_workers
  webserver_access_mode = var.mwaa_webserver_access_mode
  subnet_ids            = slice(module.network.private_subnet_ids, 0, 2)
  security_group_ids    = [module.network.airflow_security_group_id]

  dags_bucket_name = module.lake.bucket_names["dags"]
  dags_bucket_arn  = module.lake.bucket_arns["dags"]
  dags_kms_key_arn = module.lake.kms_key_arn
  requirements_txt = var.mwaa_requirements_txt

  spark_application_arn = module.spark.application_arn
  spark_job_role_arn    = module.spark.job_role_arn

  tables_bucket_arn      = module.lake.bucket_arns["tables"]
  tables_prefix          = module.lake.tables_prefix
  checkpoints_bucket_arn = module.lake.bucket_arns["checkpoints"]
  checkpoints_prefix     = module.lake.checkpoints_prefix
  lake_kms_key_arn       = module.lake.kms_key_arn

  kafka_cluster_arn        = module.kafka.cluster_arn
  kafka_topic_arns         = [for topic in var.kafka_topics : "${module.kafka.topic_arn_prefix}/${topic}"]
  kafka_group_arns         = ["${module.kafka.group_arn_prefix}/${local.kafka_client_prefix}*"]
  kafka_secret_arn         = module.kafka.scram_secret_arns[local.kafka_airflow_user]
  kafka_secret_kms_key_arn = module.kafka.kms_key_arn
}
