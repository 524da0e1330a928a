# One VPC for the platform: private subnets across AZs for every workload (MSK brokers,
# ElastiCache, EMR Serverless workers, MWAA), optional public subnets that only hold NAT
# gateways, a gateway endpoint for S3 (the lake never crosses a NAT), interface endpoints
# for the AWS APIs the jobs call, one security group per component, and VPC flow logs.

data "aws_region" "current" {}

data "aws_caller_identity" "current" {}

locals {
  az_count = length(var.azs)

  # In a /16: one /20 private subnet per AZ (4,096 addresses each, room for EMR Serverless
  # and MWAA ENIs) and small /24 public subnets at the top of the range for the NAT gateways.
  private_subnet_cidrs = [for i in range(local.az_count) : cidrsubnet(var.cidr_block, 4, i)]
  public_subnet_cidrs  = [for i in range(local.az_count) : cidrsubnet(var.cidr_block, 8, 240 + i)]

  nat_gateway_count = var.enable_nat_gateway ? (var.single_nat_gateway ? 1 : local.az_count) : 0

  flow_log_group_name = "/aws/vpc/${var.name}/flow-logs"

  # Client security groups that may reach the Kafka brokers (both listeners) and AWS APIs over
  # HTTPS; only spark reaches Redis (rules below). kafka_admin is for the CI runner or bastion
  # that applies environments/<env>-acls (IAM, 9098) and creates topics (SCRAM, 9096).
  data_clients = {
    spark       = aws_security_group.spark.id
    airflow     = aws_security_group.airflow.id
    kafka_admin = aws_security_group.kafka_admin.id
  }
  kafka_ports = {
    sasl_scram = 9096
    sasl_iam   = 9098
  }
  kafka_ingress = {
    for pair in setproduct(keys(local.data_clients), keys(local.kafka_ports)) :
    "${pair[0]}-${pair[1]}" => { client = pair[0], port = local.kafka_ports[pair[1]] }
  }
}

################################################################################
# VPC
################################################################################

resource "aws_vpc" "this" {
  cidr_block           = var.cidr_block
  enable_dns_support   = true
  enable_dns_hostnames = true

  tags = merge(var.tags, { Name = var.name })
}

# Adopt the default security group and strip all of its rules: nothing may fall back on it.
resource "aws_default_security_group" "this" {
  vpc_id = aws_vpc.this.id

  tags = merge(var.tags, { Name = "${var.name}-default-deny" })
}

resource "aws_subnet" "private" {
  count = local.az_count

  vpc_id            = aws_vpc.this.id
  cidr_block        = local.private_subnet_cidrs[count.index]
  availability_zone = var.azs[count.index]

  tags = merge(var.tags, { Name = "${var.name}-private-${var.azs[count.index]}", Tier = "private" })
}

resource "aws_route_table" "private" {
  count = local.az_count

  vpc_id = aws_vpc.this.id

  tags = merge(var.tags, { Name = "${var.name}-private-${var.azs[count.index]}" })
}

resource "aws_route_table_association" "private" {
  count = local.az_count

  subnet_id      = aws_subnet.private[count.index].id
  route_table_id = aws_route_table.private[count.index].id
}

################################################################################
# Egress to the internet (optional): MWAA installs requirements from PyPI and EMR
# Serverless fetches --packages through it. Without NAT, ship wheels and jars on S3.
################################################################################

resource "aws_subnet" "public" {
  count = local.nat_gateway_count > 0 ? local.az_count : 0

  vpc_id                  = aws_vpc.this.id
  cidr_block              = local.public_subnet_cidrs[count.index]
  availability_zone       = var.azs[count.index]
  map_public_ip_on_launch = false

  tags = merge(var.tags, { Name = "${var.name}-public-${var.azs[count.index]}", Tier = "public" })
}

resource "aws_internet_gateway" "this" {
  count = local.nat_gateway_count > 0 ? 1 : 0

  vpc_id = aws_vpc.this.id

  tags = merge(var.tags, { Name = var.name })
}

resource "aws_route_table" "public" {
  count = local.nat_gateway_count > 0 ? 1 : 0

  vpc_id = aws_vpc.this.id

  tags = merge(var.tags, { Name = "${var.name}-public" })
}

resource "aws_route" "public_internet" {
  count = local.nat_gateway_count > 0 ? 1 : 0

  route_table_id         = aws_route_table.public[0].id
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.this[0].id
}

resource "aws_route_table_association" "public" {
  count = local.nat_gateway_count > 0 ? local.az_count : 0

  subnet_id      = aws_subnet.public[count.index].id
  route_table_id = aws_route_table.public[0].id
}

resource "aws_eip" "nat" {
  count = local.nat_gateway_count

  domain = "vpc"

  tags = merge(var.tags, { Name = "${var.name}-nat-${count.index}" })

  depends_on = [aws_internet_gateway.this]
}

resource "aws_nat_gateway" "this" {
  count = local.nat_gateway_count

  allocation_id = aws_eip.nat[count.index].id
  subnet_id     = aws_subnet.public[count.index].id

  tags = merge(var.tags, { Name = "${var.name}-nat-${count.index}" })
}

resource "aws_route" "private_nat" {
  count = local.nat_gateway_count > 0 ? local.az_count : 0

  route_table_id         = aws_route_table.private[count.index].id
  destination_cidr_block = "0.0.0.0/0"
  nat_gateway_id         = aws_nat_gateway.this[var.single_nat_gateway ? 0 : count.index].id
}

################################################################################
# VPC endpoints: S3 through a free gateway endpoint; the APIs the jobs call on start
# (Secrets Manager, KMS, STS, CloudWatch Logs) through interface endpoints.
################################################################################

resource "aws_vpc_endpoint" "s3" {
  vpc_id            = aws_vpc.this.id
  service_name      = "com.amazonaws.${data.aws_region.current.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = aws_route_table.private[*].id

  tags = merge(var.tags, { Name = "${var.name}-s3" })
}

resource "aws_vpc_endpoint" "interface" {
  for_each = toset(var.interface_endpoints)

  vpc_id              = aws_vpc.this.id
  service_name        = "com.amazonaws.${data.aws_region.current.region}.${each.value}"
  vpc_endpoint_type   = "Interface"
  private_dns_enabled = true
  subnet_ids          = aws_subnet.private[*].id
  security_group_ids  = [aws_security_group.endpoints.id]

  tags = merge(var.tags, { Name = "${var.name}-${each.value}" })
}

################################################################################
# Security groups: one per component; rules name their peers, not CIDRs, except the
# HTTPS egress that AWS APIs (and PyPI through NAT) need.
################################################################################

resource "aws_security_group" "spark" {
  #checkov:skip=CKV2_AWS_5:Attached by the spark module (EMR Serverless network_configuration) through this module's outputs; checkov does not follow module outputs
  name        = "${var.name}-spark"
  description = "EMR Serverless workers of the kappa Spark jobs"
  vpc_id      = aws_vpc.this.id

  tags = merge(var.tags, { Name = "${var.name}-spark" })
}

resource "aws_security_group" "airflow" {
  #checkov:skip=CKV2_AWS_5:Attached by the airflow module (MWAA network_configuration) through this module's outputs; checkov does not follow module outputs
  name        = "${var.name}-airflow"
  description = "MWAA scheduler, workers and webserver ENIs"
  vpc_id      = aws_vpc.this.id

  tags = merge(var.tags, { Name = "${var.name}-airflow" })
}

resource "aws_security_group" "kafka" {
  #checkov:skip=CKV2_AWS_5:Attached by the kafka module (MSK broker_node_group_info) through this module's outputs; checkov does not follow module outputs
  name        = "${var.name}-kafka"
  description = "MSK broker ENIs: SASL/SCRAM and IAM listeners, from platform clients only"
  vpc_id      = aws_vpc.this.id

  tags = merge(var.tags, { Name = "${var.name}-kafka" })
}

resource "aws_security_group" "kafka_admin" {
  #checkov:skip=CKV2_AWS_5:Attached outside Terraform to the CI runner or bastion that applies the Kafka ACLs (environments/<env>-acls) and creates topics; see docs/runbooks/terraform.md
  name        = "${var.name}-kafka-admin"
  description = "Operator host or CI runner in the VPC: Kafka ACLs over IAM, topic administration over SCRAM"
  vpc_id      = aws_vpc.this.id

  tags = merge(var.tags, { Name = "${var.name}-kafka-admin" })
}

resource "aws_security_group" "redis" {
  #checkov:skip=CKV2_AWS_5:Attached by the redis module (replication group) through this module's outputs; checkov does not follow module outputs
  name        = "${var.name}-redis"
  description = "ElastiCache Redis, TLS port, from platform clients only"
  vpc_id      = aws_vpc.this.id

  tags = merge(var.tags, { Name = "${var.name}-redis" })
}

resource "aws_security_group" "endpoints" {
  name        = "${var.name}-endpoints"
  description = "Interface VPC endpoints, HTTPS from inside the VPC"
  vpc_id      = aws_vpc.this.id

  tags = merge(var.tags, { Name = "${var.name}-endpoints" })
}

# Spark driver and executors talk to each other; MWAA components talk to each other
# (AWS requires the self-referencing rule for MWAA).
resource "aws_vpc_security_group_ingress_rule" "self" {
  for_each = { spark = aws_security_group.spark.id, airflow = aws_security_group.airflow.id }

  security_group_id            = each.value
  referenced_security_group_id = each.value
  ip_protocol                  = "-1"
  description                  = "All traffic between members of the ${each.key} group"
}

resource "aws_vpc_security_group_egress_rule" "self" {
  for_each = { spark = aws_security_group.spark.id, airflow = aws_security_group.airflow.id }

  security_group_id            = each.value
  referenced_security_group_id = each.value
  ip_protocol                  = "-1"
  description                  = "All traffic between members of the ${each.key} group"
}

resource "aws_vpc_security_group_egress_rule" "https" {
  for_each = local.data_clients

  security_group_id = each.value
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  description       = "HTTPS to AWS APIs (endpoints, S3 gateway) and, through NAT, package indexes"
}

resource "aws_vpc_security_group_egress_rule" "to_kafka" {
  for_each = local.kafka_ingress

  security_group_id            = local.data_clients[each.value.client]
  referenced_security_group_id = aws_security_group.kafka.id
  ip_protocol                  = "tcp"
  from_port                    = each.value.port
  to_port                      = each.value.port
  description                  = "Kafka (${each.key}) to the MSK brokers"
}

resource "aws_vpc_security_group_ingress_rule" "kafka" {
  for_each = local.kafka_ingress

  security_group_id            = aws_security_group.kafka.id
  referenced_security_group_id = local.data_clients[each.value.client]
  ip_protocol                  = "tcp"
  from_port                    = each.value.port
  to_port                      = each.value.port
  description                  = "Kafka (${each.key}) from the ${each.value.client} group"
}

resource "aws_vpc_security_group_egress_rule" "to_redis" {
  security_group_id            = aws_security_group.spark.id
  referenced_security_group_id = aws_security_group.redis.id
  ip_protocol                  = "tcp"
  from_port                    = var.redis_port
  to_port                      = var.redis_port
  description                  = "Redis (TLS) from the Spark jobs, which write the live summaries"
}

resource "aws_vpc_security_group_ingress_rule" "redis" {
  security_group_id            = aws_security_group.redis.id
  referenced_security_group_id = aws_security_group.spark.id
  ip_protocol                  = "tcp"
  from_port                    = var.redis_port
  to_port                      = var.redis_port
  description                  = "Redis (TLS) from the Spark jobs"
}

resource "aws_vpc_security_group_ingress_rule" "endpoints" {
  security_group_id = aws_security_group.endpoints.id
  cidr_ipv4         = aws_vpc.this.cidr_block
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  description       = "HTTPS from inside the VPC to the interface endpoints"
}

################################################################################
# Flow logs (optional): rejected and accepted flows to a KMS-encrypted log group.
################################################################################

module "flow_logs_key" {
  source = "../kms"
  count  = var.enable_flow_logs ? 1 : 0

  name                 = "${var.name}-flow-logs"
  description          = "${var.name}: VPC flow logs"
  log_group_names      = [local.flow_log_group_name]
  deletion_window_days = var.kms_deletion_window_days
  tags                 = var.tags
}

resource "aws_cloudwatch_log_group" "flow_logs" {
  count = var.enable_flow_logs ? 1 : 0

  name              = local.flow_log_group_name
  retention_in_days = var.flow_log_retention_days
  kms_key_id        = module.flow_logs_key[0].key_arn

  tags = var.tags
}

data "aws_iam_policy_document" "flow_logs_assume" {
  count = var.enable_flow_logs ? 1 : 0

  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["vpc-flow-logs.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

data "aws_iam_policy_document" "flow_logs" {
  count = var.enable_flow_logs ? 1 : 0

  statement {
    sid       = "WriteTheFlowLogGroupOnly"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
    resources = ["${aws_cloudwatch_log_group.flow_logs[0].arn}:*"]
  }
}

resource "aws_iam_role" "flow_logs" {
  count = var.enable_flow_logs ? 1 : 0

  name_prefix        = "${var.name}-flow-logs-"
  assume_role_policy = data.aws_iam_policy_document.flow_logs_assume[0].json

  tags = var.tags
}

resource "aws_iam_role_policy" "flow_logs" {
  count = var.enable_flow_logs ? 1 : 0

  name   = "write-flow-logs"
  role   = aws_iam_role.flow_logs[0].id
  policy = data.aws_iam_policy_document.flow_logs[0].json
}

resource "aws_flow_log" "this" {
  count = var.enable_flow_logs ? 1 : 0

  vpc_id               = aws_vpc.this.id
  traffic_type         = "ALL"
  log_destination_type = "cloud-watch-logs"
  log_destination      = aws_cloudwatch_log_group.flow_logs[0].arn
  iam_role_arn         = aws_iam_role.flow_logs[0].arn

  tags = var.tags
}
