output "vpc_id" {
  description = "ID of the VPC."
  value       = aws_vpc.this.id
}

output "vpc_cidr_block" {
  description = "IPv4 CIDR of the VPC."
  value       = aws_vpc.this.cidr_block
}

output "azs" {
  description = "Availability zones the private subnets are in, in subnet order."
  value       = var.azs
}

output "private_subnet_ids" {
  description = "Private subnet IDs, one per AZ, in the order of azs."
  value       = aws_subnet.private[*].id
}

output "private_route_table_ids" {
  description = "Route table IDs of the private subnets."
  value       = aws_route_table.private[*].id
}

output "nat_public_ips" {
  description = "Public IPs of the NAT gateways (allow-list these at third parties the jobs call)."
  value       = aws_eip.nat[*].public_ip
}

output "s3_endpoint_id" {
  description = "ID of the S3 gateway endpoint."
  value       = aws_vpc_endpoint.s3.id
}

output "spark_security_group_id" {
  description = "Security group for the EMR Serverless application's workers."
  value       = aws_security_group.spark.id
}

output "airflow_security_group_id" {
  description = "Security group for the MWAA environment."
  value       = aws_security_group.airflow.id
}

output "kafka_security_group_id" {
  description = "Security group for the MSK brokers."
  value       = aws_security_group.kafka.id
}

output "redis_security_group_id" {
  description = "Security group for the ElastiCache replication group."
  value       = aws_security_group.redis.id
}

output "kafka_admin_security_group_id" {
  description = "Security group for the host that applies the Kafka ACLs and creates topics (reaches the brokers on 9096/9098 and AWS APIs on 443); attach it to that CI runner or bastion."
  value       = aws_security_group.kafka_admin.id
}
