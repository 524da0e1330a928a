"""The configuration: one frozen, validated object per run, its models and secrets."""
