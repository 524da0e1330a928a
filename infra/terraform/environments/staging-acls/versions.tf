terraform {
  required_version = ">= 1.10, < 2.0"

  # Partial configuration: bucket, key and region come from
  #   terraform init -backend-config=backend.hcl   (see backend.hcl.example)
  # This state holds no secret (the provider authenticates with the runner's IAM role), but keep
  # it with the platform's: private, versioned, encrypted.
  backend "s3" {
    encrypt      = true
    use_lockfile = true
  }

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 6.0"
    }
    kafka = {
      source  = "Mongey/kafka"
      version = "~> 0.13"
    }
  }
}
