terraform {
  required_version = ">= 1.10, < 2.0"

  # Partial configuration: bucket, key and region come from
  #   terraform init -backend-config=backend.hcl   (see backend.hcl.example)
  # The state holds the generated SCRAM password and Redis AUTH token: the state bucket must
  # be private, versioned and encrypted, and readable only by the people who run apply.
  backend "s3" {
    encrypt      = true
    use_lockfile = true
  }

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 6.0"
    }
    random = {
      source  = "hashicorp/random"
      version = "~> 3.6"
    }
  }
}
