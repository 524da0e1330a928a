terraform {
  required_version = ">= 1.10"

  # The component modules declare what they use (aws, random); the caller configures aws.
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 6.0"
    }
  }
}
