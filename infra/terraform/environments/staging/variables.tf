# Where staging runs; its shape and sizes are arguments of module "platform" in main.tf.

variable "region" {
  type        = string
  description = "AWS region of the whole platform."
  default     = "eu-west-1"
}

variable "availability_zones" {
  type        = list(string)
  description = "Three availability zones of var.region, one MSK broker and one private subnet in each (change with region)."
  default     = ["eu-west-1a", "eu-west-1b", "eu-west-1c"]
}
