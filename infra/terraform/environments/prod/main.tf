# kappa in production: the platform of modules/platform, sized for the 24/7 streaming job and
# built to be kept (three NAT gateways, interface endpoints, 30-day recovery of keys and secrets,
# buckets that terraform destroy refuses to empty). Everything that sets prod apart from staging
# is an argument below; change it here and commit (docs/runbooks/terraform.md).

locals {
  environment = "prod"
}

provider "aws" {
  region = var.region

  default_tags {
    tags = {
      Project     = "kappa"
      Environment = local.environment
      ManagedBy   = "terraform"
    }
  }
}

module "platform" {
  source = "../../modules/platform"

  environment        = local.environment
  availability_zones = var.availability_zones

  vpc_cidr                = "10.40.0.0/16"
  single_nat_gateway      = false
  vpc_interface_endpoints = ["secretsmanager", "kms", "sts", "logs"]

  # Kept: data survives a destroy, deleted keys and secrets stay recoverable for 30 days.
  allow_destroy_with_data     = false
  kms_deletion_window_days    = 30
  secret_recovery_window_days = 30

  kafka_broker_instance_type = "kafka.m7g.large"
  kafka_broker_volume_size   = 200
  redis_node_type            = "cache.r7g.large"
  spark_maximum_capacity     = { cpu = "48 vCPU", memory = "192 GB", disk = "1000 GB" }
  mwaa_environment_class     = "mw1.medium"
  mwaa_max_workers           = 5
  mwaa_requirements_txt      = file("${path.module}/mwaa-requirements.txt")

  # Credential generations: increment to rotate (docs/runbooks/terraform.md), and commit.
  kafka_scram_rotation      = 1
  kafka_scram_user_rotation = {}
  redis_auth_rotation       = 1
}
