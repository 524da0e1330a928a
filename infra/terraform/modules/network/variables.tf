variable "name" {
  type        = string
  description = "Name prefix for every resource in the network, e.g. \"kappa-prod\"."
}

variable "cidr_block" {
  type        = string
  description = "IPv4 CIDR of the VPC; a /16 leaves room for /20 private subnets and /24 public ones."
  default     = "10.40.0.0/16"

  validation {
    condition     = can(cidrhost(var.cidr_block, 0)) && tonumber(split("/", var.cidr_block)[1]) <= 16
    error_message = "cidr_block must be a valid IPv4 CIDR of size /16 or larger."
  }
}

variable "azs" {
  type        = list(string)
  description = "Availability zones to spread the subnets over, e.g. [\"eu-west-1a\", \"eu-west-1b\", \"eu-west-1c\"] (MSK places one broker per AZ)."

  validation {
    condition     = length(var.azs) >= 2 && length(var.azs) <= 6 && length(distinct(var.azs)) == length(var.azs)
    error_message = "azs must list 2 to 6 distinct zones (MWAA needs two subnets in different AZs)."
  }
}

variable "enable_nat_gateway" {
  type        = bool
  description = "Create public subnets and NAT gateways so private workloads reach the internet (PyPI for MWAA requirements)."
  default     = true
}

variable "single_nat_gateway" {
  type        = bool
  description = "One shared NAT gateway instead of one per AZ: cheaper, but an AZ outage cuts egress for all."
  default     = false
}

variable "interface_endpoints" {
  type        = list(string)
  description = "AWS service names (the part after com.amazonaws.<region>.) that get an interface VPC endpoint."
  default     = ["secretsmanager", "kms", "sts", "logs"]
}

variable "redis_port" {
  type        = number
  description = "TCP port of the ElastiCache Redis endpoint, opened from the Spark security group."
  default     = 6379
}

variable "enable_flow_logs" {
  type        = bool
  description = "Send VPC flow logs to a KMS-encrypted CloudWatch log group."
  default     = true
}

variable "flow_log_retention_days" {
  type        = number
  description = "Retention of the flow log group, in days."
  default     = 365
}

variable "kms_deletion_window_days" {
  type        = number
  description = "Waiting period before a deleted KMS key is destroyed (7-30 days)."
  default     = 30
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource."
  default     = {}
}
