"""Shared foundation: config, errors, Spark session factory, embedded stack, I/O adapters."""
