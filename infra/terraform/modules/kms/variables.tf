variable "name" {
  type        = string
  description = "Alias of the key, without the alias/ prefix, e.g. \"kappa-prod-lake\"."
}

variable "description" {
  type        = string
  description = "What the key encrypts, shown in the KMS console."
}

variable "log_group_names" {
  type        = list(string)
  description = "CloudWatch log groups that may be encrypted with this key (empty: none)."
  default     = []
}

variable "deletion_window_days" {
  type        = number
  description = "Waiting period before a deleted key is destroyed (7-30 days)."
  default     = 30

  validation {
    condition     = var.deletion_window_days >= 7 && var.deletion_window_days <= 30
    error_message = "deletion_window_days must be between 7 and 30."
  }
}

variable "tags" {
  type        = map(string)
  description = "Tags added to the key."
  default     = {}
}
