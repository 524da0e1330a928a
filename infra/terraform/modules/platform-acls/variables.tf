variable "kafka_topics" {
  type        = list(string)
  description = "Platform topics (conf/base.yaml); ACLs name only these, by exact name. Keep in step with modules/platform."
  default     = ["rsvps.raw", "rsvps.analyzed", "rsvps.summaries", "rsvps.dlq", "platform.metrics", "platform.errors"]
}

variable "kafka_workloads" {
  type = map(object({
    topics              = optional(map(list(string)), {})
    groups              = optional(map(list(string)), {})
    idempotent_producer = optional(bool, true)
  }))
  description = "Kafka ACLs per SCRAM user (one of modules/platform's kafka_scram_users): topics by access kind (consume, produce, describe, manage) and consumer-group prefixes (consume, describe); modules/kafka-acls says what each kind grants."
  default = {
    # The HTTP collector: produces the raw RSVPs and dead-letters malformed ones.
    collector = {
      topics = {
        produce = ["rsvps.raw", "rsvps.dlq"]
      }
    }
    # The streaming job (and its backfills): raw in; analyzed, summaries, DLQ, metrics, errors out.
    streaming = {
      topics = {
        consume = ["rsvps.raw"]
        produce = ["rsvps.analyzed", "rsvps.summaries", "rsvps.dlq", "platform.metrics", "platform.errors"]
      }
      groups = {
        consume = ["kappa-streaming"]
      }
    }
    # The Kafka -> Delta loader: reads every platform topic, reports to metrics and errors.
    loader = {
      topics = {
        consume = ["rsvps.raw", "rsvps.analyzed", "rsvps.summaries", "rsvps.dlq", "platform.metrics", "platform.errors"]
        produce = ["platform.metrics", "platform.errors"]
      }
      groups = {
        consume = ["kappa-loader"]
      }
    }
    # MWAA: offsets of the topics and of the jobs' groups (backfills); no data in or out.
    airflow = {
      topics = {
        describe = ["rsvps.raw", "rsvps.analyzed", "rsvps.summaries", "rsvps.dlq", "platform.metrics", "platform.errors"]
      }
      groups = {
        describe = ["kappa-"]
      }
    }
    # The operator's `kappa topics apply` / `kappa topics list`: create and configure the
    # platform topics, read no data.
    operator = {
      topics = {
        manage = ["rsvps.raw", "rsvps.analyzed", "rsvps.summaries", "rsvps.dlq", "platform.metrics", "platform.errors"]
      }
    }
  }
}
