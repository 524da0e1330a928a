variable "region" {
  type        = string
  description = "AWS region of the platform (environments/staging's, where the MSK cluster is)."
  default     = "eu-west-1"
}
