"""kappa: an Airflow-orchestrated, kappa-style data platform on Spark, Kafka, Redis and Delta."""
