# The Kafka ACLs of the kappa platform's SCRAM users (modules/platform creates the users): which
# workload may read, write or describe which platform topic, and under which consumer-group
# prefix. A composition module: no resources of its own, one call of modules/kafka-acls with the
# platform's grant table. Every <env>-acls root calls it once, with a kafka provider that reaches
# that environment's brokers (docs/runbooks/terraform.md#kafka-acls).

module "kafka_acls" {
  source = "../kafka-acls"

  workloads = var.kafka_workloads
  topics    = var.kafka_topics
}
