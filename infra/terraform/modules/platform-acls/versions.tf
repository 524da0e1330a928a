terraform {
  required_version = ">= 1.10"

  # The caller configures the kafka provider (it must reach the brokers from inside the VPC).
  required_providers {
    kafka = {
      source  = "Mongey/kafka"
      version = "~> 0.13"
    }
  }
}
