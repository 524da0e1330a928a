"""The Spark runtime: the session, its backends and JVM, workers, submission, the service's client."""
