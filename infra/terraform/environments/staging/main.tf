# kappa in staging: the same platform as prod (modules/platform, same wiring and outputs), smaller
# and disposable: one NAT gateway, no interface endpoints, burstable brokers and cache, and a
# destroy that takes the data with it (docs/runbooks/terraform.md#destroying-staging).

locals {
  environment = "staging"
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

  vpc_cidr                = "10.41.0.0/16"
  single_nat_gateway      = true
  vpc_interface_endpoints = []

  # Disposable: destroy empties the buckets, keys go after 7 days, secret names are free at once.
  allow_destroy_with_data     = true
  kms_deletion_window_days    = 7
  secret_recovery_window_days = 0

  kafka_broker_instance_type = "kafka.t3.small"
  kafka_broker_volume_size   = 20
  redis_node_type            = "cache.t4g.small"
  spark_maximum_capacity     = { cpu = "16 vCPU", memory = "64 GB", disk = "200 GB" }
  mwaa_environment_class     = "mw1.small"
  mwaa_max_workers           = 2
  mwaa_requirements_txt      = file("${path.module}/mwaa-requirements.txt")

  # Credential generations: increment to rotate (docs/runbooks/terraform.md), and commit.
  kafka_scram_rotation      = 1
  kafka_scram_user_rotation = {}
  redis_auth_rotation       = 1
}
