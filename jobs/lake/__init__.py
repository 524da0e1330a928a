"""The lake's storage: Delta tables (delta-rs), where they live, and a job's state files."""
