"""Option validation mirrors KafkaSourceProvider: errors name the option, the value and a fix."""

from __future__ import annotations

import pytest

from jobs.errors import KafkaSourceError
from jobs.kafka.client import LIBRDKAFKA_LOG, admin_config, consumer_config, producer_config
from jobs.kafka.options import parse_sink_options, parse_source_options
from jobs.kafka.specs import EARLIEST, LATEST, OFFSETS, TIMESTAMP, TIMESTAMPS

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a"}


def parse(streaming: bool = False, **options: str):
    return parse_source_options({**BASE, **options}, streaming=streaming)


def test_defaults_follow_the_jvm_connector():
    batch, stream = parse(), parse(streaming=True)
    assert (batch.starting.kind, batch.ending.kind) == (EARLIEST, LATEST)
    assert (stream.starting.kind, stream.ending) == (LATEST, None)
    assert batch.fail_on_data_loss is True and batch.include_headers is False
    assert batch.kafka == {"bootstrap.servers": "127.0.0.1:9092"}
    assert stream.group_id_prefix == "spark-kafka-source"


def test_options_are_case_insensitive_and_parsed():
    opts = parse_source_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SubscribePattern": "rsvps\\..*",
                                 "STARTINGOFFSETS": '{"a":{"0":5,"1":-2}}', "maxOffsetsPerTrigger": "7",
                                 "includeHeaders": "TRUE", "failOnDataLoss": "false"}, streaming=True)
    assert opts.pattern == "rsvps\\..*"
    assert opts.starting.kind == OFFSETS and dict(opts.starting.values) == {("a", 0): 5, ("a", 1): -2}
    assert opts.max_offsets_per_trigger == 7
    assert opts.include_headers is True and opts.fail_on_data_loss is False


def test_timestamps_and_assign():
    opts = parse(startingTimestamp="1700000000000", endingOffsetsByTimestamp='{"a":{"0":1800000000000}}')
    assert opts.starting.kind == TIMESTAMP and opts.starting.timestamp == 1_700_000_000_000
    assert opts.ending.kind == TIMESTAMPS
    assigned = parse_source_options({"kafka.bootstrap.servers": "h:1", "assign": '{"b":[1,0],"a":[2]}'},
                                    streaming=True)
    assert assigned.assign == (("a", 2), ("b", 0), ("b", 1))


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": None}, "exactly one of the options 'subscribe', 'subscribePattern', 'assign'"),
    ({"subscribePattern": "x"}, "(found subscribe, subscribepattern)"),
    ({"subscribe": " , "}, "option 'subscribe' is ' , ': no topics to subscribe to"),
    ({"subscribe": None, "subscribePattern": "(["}, "not a valid regular expression"),
    ({"subscribe": None, "assign": "[1]"}, "option 'assign' is '[1]'"),
    ({"kafka.bootstrap.servers": None}, "option 'kafka.bootstrap.servers' must be specified"),
    ({"kafka.auto.offset.reset": "earliest"}, "set the source option 'startingOffsets'"),
    ({"kafka.enable.auto.commit": "true"}, "use 'commitOffsetsToGroup'"),
    ({"kafka.value.deserializer": "x"}, "'kafka.value.deserializer' is not supported"),
    ({"failOnDataLoss": "yes"}, "option 'failOnDataLoss' is 'yes': expected 'true' or 'false'"),
    ({"maxOffsetsPerTrigger": "0"}, "option 'maxOffsetsPerTrigger' is '0': expected a positive"),
    ({"minPartitions": "-1"}, "option 'minPartitions' is '-1'"),
    ({"startingOffsets": "latest"}, "can't be latest for batch queries"),
    ({"startingOffsets": '{"a":{"0":-1}}'}, "for a-0 is -1 (latest)"),
    ({"endingOffsets": "earliest"}, "option 'endingOffsets' is 'earliest'"),
    ({"endingOffsets": '{"a":{"0":-2}}'}, "for a-0 is -2 (earliest)"),
    ({"startingOffsets": "erliest"}, "expected 'earliest', 'latest' or a JSON object"),
    ({"startingOffsets": '{"a":{"0":-3}}'}, "expected a offset >= -2 (-2 = earliest, -1 = latest)"),
    ({"startingOffsets": '{"a":{"x":1}}'}, "is not partition number -> integer offset"),
    ({"startingOffsets": '{"a":{"0":9}}', "endingOffsets": '{"a":{"0":3}}'},
     "for a-0 is 9, after 'endingOffsets' 3"),
    ({"startingOffsets": '{"a":{"0":1}}', "endingOffsets": '{"a":{"1":3}}'},
     "name different topic-partitions (a-0 vs a-1)"),
    ({"startingOffsets": "earliest", "startingTimestamp": "5"}, "are both set; keep exactly one"),
    ({"startingTimestamp": "yesterday"}, "option 'startingTimestamp' is 'yesterday'"),
    ({"startingTimestamp": "9", "endingTimestamp": "3"}, "is after 'endingTimestamp' (3)"),
    ({"startingOffsetsByTimestampStrategy": "skip"}, "expected 'error' or 'latest'"),
    ({"maxOffsetPerTrigger": "5"}, "unknown option 'maxoffsetpertrigger'"),
    ({"minOffsetsPerTrigger": "5"}, "option 'minoffsetspertrigger' is not supported"),
    ({"commitOffsetsToGroup": " "}, "option 'commitOffsetsToGroup' is empty"),
])
def test_bad_options_raise_naming_option_value_and_fix(options, message):
    merged = {key: value for key, value in {**BASE, **options}.items() if value is not None}
    with pytest.raises(KafkaSourceError) as info:
        parse_source_options(merged, streaming=False)
    assert message in str(info.value)


def test_unknown_option_suggests_the_close_name():
    with pytest.raises(KafkaSourceError, match="did you mean 'maxoffsetspertrigger'"):
        parse(maxOffsetPerTrigger="5")


def test_streaming_accepts_an_ending_bound_but_never_earliest():
    assert parse(streaming=True, endingOffsets='{"a":{"0":10}}').ending.kind == OFFSETS
    with pytest.raises(KafkaSourceError, match="can't be earliest"):
        parse(streaming=True, endingOffsets="earliest")


def test_sink_options():
    sink = parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": " out ",
                               "checkpointLocation": "/tmp/c"})
    assert sink.topic == "out" and sink.kafka == {"bootstrap.servers": "h:1"}
    with pytest.raises(KafkaSourceError, match="option 'topic' is empty"):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": " "})
    with pytest.raises(KafkaSourceError, match=r"'kafka\.key\.serializer' is not supported"):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "kafka.key.serializer": "x"})


def test_client_defaults_can_be_overridden_but_not_the_safety_settings():
    props = consumer_config({"bootstrap.servers": "h:1", "fetch.max.bytes": "2000000000",
                             "isolation.level": "read_committed"}, "p")
    assert props["receive.message.max.bytes"] == str(2_000_000_512)
    assert props["isolation.level"] == "read_committed"
    assert props["auto.offset.reset"] == "error" and props["enable.auto.commit"] == "false"
    assert props["group.id"].startswith("p-executor-")
    producer = producer_config({"bootstrap.servers": "h:1", "linger.ms": "50"})
    assert producer["enable.idempotence"] == "true" and producer["acks"] == "all"
    assert producer["linger.ms"] == "50" and producer["delivery.report.only.error"] is True
    assert producer["compression.type"] == "lz4"  # as the collector writes rsvps.raw
    assert producer_config({"bootstrap.servers": "h:1", "compression.type": "zstd"})[
        "compression.type"] == "zstd"


def test_admin_clients_keep_connection_and_security_properties_only():
    props = admin_config({"bootstrap.servers": "h:1", "security.protocol": "SSL",
                          "enable.ssl.certificate.verification": "false", "fetch.max.bytes": "1",
                          "enable.auto.commit": "false", "acks": "all", "isolation.level": "x"})
    assert props.pop("logger") is LIBRDKAFKA_LOG    # librdkafka's lines, rate-limited
    assert props == {"bootstrap.servers": "h:1", "security.protocol": "SSL",
                     "enable.ssl.certificate.verification": "false"}


def test_consumer_cache_options():
    defaults = parse()
    assert (defaults.consumer_cache_capacity, defaults.consumer_cache_timeout_ms) == (16, 300_000)
    tuned = parse_source_options({**BASE, "consumerCache.capacity": "0",
                                  "consumerCache.timeoutMs": "5000"}, streaming=True)
    assert (tuned.consumer_cache_capacity, tuned.consumer_cache_timeout_ms) == (0, 5000)
    for option, value in (("consumerCache.capacity", "-1"), ("consumerCache.capacity", "x"),
                          ("consumerCache.timeoutMs", "0")):
        with pytest.raises(KafkaSourceError, match=option):
            parse_source_options({**BASE, option: value}, streaming=True)


def test_fetch_spill_options():
    defaults = parse()
    assert (defaults.fetch_spill_max_bytes, defaults.fetch_spill_ttl_ms, defaults.fetch_spill_dir) == (
        1024 * 2**20, 120_000, None)
    tuned = parse_source_options({**BASE, "fetchSpill.maxBytes": "0", "fetchSpill.ttlMs": "1000",
                                  "fetchSpill.dir": "/data/spill"}, streaming=True)
    assert (tuned.fetch_spill_max_bytes, tuned.fetch_spill_ttl_ms, tuned.fetch_spill_dir) == (
        0, 1000, "/data/spill")
    for option, value in (("fetchSpill.maxBytes", "-1"), ("fetchSpill.ttlMs", "0"), ("fetchSpill.dir", " ")):
        with pytest.raises(KafkaSourceError, match=option):
            parse_source_options({**BASE, option: value}, streaming=True)


def test_emit_ranges_option():
    assert parse().emit_ranges is False
    assert parse_source_options({**BASE, "emitRanges": "TRUE"}, streaming=True).emit_ranges is True
    with pytest.raises(KafkaSourceError, match="emitRanges"):
        parse_source_options({**BASE, "emitRanges": "yes please"}, streaming=True)
