# The Kafka ACLs of prod's SCRAM users (modules/platform-acls), a root of its own because the
# kafka provider talks to the brokers: apply it from inside the VPC (a CI runner or bastion in the
# platform's kafka-admin security group), after environments/prod created the cluster and the
# users. The provider authenticates with the runner's IAM role on the IAM listener (9098): Kafka
# ACLs do not apply to IAM principals, so it needs no super user, only the platform's
# kafka_admin_policy_arn (kafka-cluster:AlterCluster on this cluster) attached to its role.

locals {
  environment = "prod"
}

# Only reads the cluster's IAM bootstrap brokers: this root creates nothing in AWS (no tags).
provider "aws" {
  region = var.region
}

data "aws_msk_cluster" "this" {
  cluster_name = "kappa-${local.environment}"
}

provider "kafka" {
  bootstrap_servers = sort(split(",", data.aws_msk_cluster.this.bootstrap_brokers_sasl_iam))
  tls_enabled       = true
  sasl_mechanism    = "aws-iam"
  sasl_aws_region   = var.region
}

module "platform_acls" {
  source = "../../modules/platform-acls"
}
