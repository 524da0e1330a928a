"""Pure transforms of the RSVP stream: parse and validate, normalize, dead letters, outputs.

Every function here is ``DataFrame -> DataFrame`` (or a factory of one) and never touches a
SparkSession, a reader or a writer: the streaming job, bounded replays, the loader and the
tests compose them with ``df.transform(...)``. Input is a DataFrame of Spark's Kafka source
schema (``value``, ``topic``, ``partition``, ``offset``, ``timestamp``); the contracts of the
outputs are in docs/streaming.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.common import rsvp_schema as schema

Transform = Callable[[DataFrame], DataFrame]

ANALYZED_SCHEMA_VERSION = 1
CORRUPT = "_corrupt_record"
SOURCE_COLUMNS = ("topic", "partition", "offset", "timestamp")
LAT_RANGE = (-90.0, 90.0)
LON_RANGE = (-180.0, 180.0)


@dataclass(frozen=True)
class Rules:
    """The business rules of validation (from ``streaming.*`` and ``collector.*`` config)."""

    min_event_ms: int = 946_684_800_000
    future_skew_ms: int = 300_000
    max_record_bytes: int = 65_536


def _parse_schema():
    from pyspark.sql import types as T

    base = schema.to_struct_type()
    return T.StructType([*base.fields, T.StructField(CORRUPT, T.StringType(), True)])


def _leaves(fields: tuple[schema.Field, ...], prefix: str = "") -> list[tuple[str, schema.Field]]:
    """Dotted paths of every field of the schema outside arrays (structs included)."""
    out: list[tuple[str, schema.Field]] = []
    for field in fields:
        path = f"{prefix}{field.name}"
        out.append((path, field))
        if field.type == "struct":
            out.extend(_leaves(field.fields, f"{path}."))
    return out


def _missing_checks(r: Column, fields: tuple[schema.Field, ...], prefix: str = "",
                    present: Column | None = None) -> list[Column]:
    """One check per required field, evaluated only where its parent struct is present."""
    checks: list[Column] = []
    for field in fields:
        path, col = f"{prefix}{field.name}", r.getField(field.name)
        absent = col.isNull() if present is None else present & col.isNull()
        if field.required and field.type != "array":
            checks.append(F.when(absent, F.lit(path)))
        here = col.isNotNull() if present is None else present & col.isNotNull()
        if field.type == "struct":
            checks.extend(_missing_checks(col, field.fields, f"{path}.", here))
        elif field.type == "array":
            if field.required:
                checks.append(F.when(absent, F.lit(path)))
            for child in field.fields:
                if child.required:
                    checks.append(F.when(
                        here & F.exists(col, _field_is_null(child.name)),
                        F.lit(f"{path}[].{child.name}")))
    return checks


def _field_is_null(name: str) -> Callable[[Column], Column]:
    return lambda item: item.getField(name).isNull()


def _missing(r: Column) -> Column:
    """Comma-separated dotted paths of required fields that are absent or null ('' if none)."""
    return F.concat_ws(", ", *_missing_checks(r, schema.RSVP_FIELDS))


def _json_type(v: Column, path: str) -> Column:
    """The JSON type at ``path`` of a parsed variant (``STRING``, ``VOID`` for null; null if absent)."""
    return F.schema_of_variant(F.try_variant_get(v, path, "variant"))


def _is_not_string(json_type: Column) -> Column:
    return json_type.isNotNull() & ~json_type.isin("STRING", "VOID")


def _not_strings(v: Column) -> list[tuple[str, Column]]:
    """(path, condition) per string field holding another JSON type.

    ``from_json`` silently turns a number or an object into its JSON text in a string field, so
    string fields are checked on the parsed variant.
    """
    checks: list[tuple[str, Column]] = []
    for path, field in _leaves(schema.RSVP_FIELDS):
        if field.type == "string":
            checks.append((path, _is_not_string(_json_type(v, f"$.{path}"))))
        elif field.type == "array":
            items = F.try_variant_get(v, f"$.{path}", "array<variant>")
            for child in (c for c in field.fields if c.type == "string"):
                checks.append((f"{path}[].{child.name}", F.coalesce(F.exists(
                    items, _child_not_string(child.name)), F.lit(False))))
    return checks


def _child_not_string(name: str) -> Callable[[Column], Column]:
    return lambda item: _is_not_string(_json_type(item, f"$.{name}"))


def _wrong_types(r: Column, raw: Column, v: Column) -> Column:
    """Paths present in the JSON whose value did not fit the schema's type."""
    checks = [
        F.when(F.get_json_object(raw, f"$.{path}").isNotNull() & _get(r, path).isNull(),
               F.lit(f"{path} must be {_type_name(field)}"))
        for path, field in _leaves(schema.RSVP_FIELDS)
    ]
    checks += [F.when(bad, F.lit(f"{path} must be a string")) for path, bad in _not_strings(v)]
    text = F.concat_ws(", ", *checks)
    return F.when(text == "", F.lit("a value does not match the RSVP schema")).otherwise(text)


def _type_name(field: schema.Field) -> str:
    names = {"long": "an integer", "double": "a number", "string": "a string",
             "struct": "an object", "array": "an array"}
    return names[field.type]


def _get(r: Column, path: str) -> Column:
    col = r
    for part in path.split("."):
        col = col.getField(part)
    return col


def _invalid_values(r: Column) -> Column:
    """Values outside their domain ('' if none)."""
    lat, lon = _coordinates(r)
    city = r.group.group_city
    checks = [
        F.when(~r.response.isin(*schema.RESPONSES),
               F.concat(F.lit("response must be yes or no, found "),
                        F.regexp_replace(F.to_json(F.array(r.response)), r"^\[|\]$", ""))),
        F.when(r.guests < 0, F.concat(F.lit("guests must be >= 0, found "), r.guests.cast("string"))),
        F.when(normalize_city(city) == "", F.lit("group.group_city is empty")),
        F.when(~lat.between(*LAT_RANGE), F.concat(F.lit("latitude out of range: "), lat.cast("string"))),
        F.when(~lon.between(*LON_RANGE), F.concat(F.lit("longitude out of range: "), lon.cast("string"))),
    ]
    return F.concat_ws("; ", *checks)


def _coordinates(r: Column) -> tuple[Column, Column]:
    """The venue's coordinates when the record has a venue, else the group's."""
    return (F.coalesce(r.venue.lat, r.group.group_lat), F.coalesce(r.venue.lon, r.group.group_lon))


def _bad_time(r: Column, kafka_ts_ms: Column, rules: Rules) -> Column:
    too_old = r.mtime < F.lit(rules.min_event_ms)
    too_new = r.mtime > kafka_ts_ms + F.lit(rules.future_skew_ms)
    return (F.when(too_old, F.concat(F.lit("mtime "), r.mtime.cast("string"),
                                     F.lit(f" is before {rules.min_event_ms} (2000-01-01)")))
            .when(too_new, F.concat(F.lit("mtime "), r.mtime.cast("string"),
                                    F.lit(f" is more than {rules.future_skew_ms} ms after the record's "
                                          "Kafka timestamp "), kafka_ts_ms.cast("string"))))


def _reason(code: str, detail: Column) -> Column:
    return F.concat(F.lit(f"{code}: "), detail)


def parse_rsvps(rules: Rules = Rules()) -> Transform:
    """Parse ``value`` with the RSVP schema; add ``rsvp`` (struct) and ``reason`` (null if valid).

    Reasons, first match wins: ``oversize``, ``invalid_json``, ``not_an_object``,
    ``wrong_type``, ``missing_field``, ``invalid_value``, ``bad_event_time`` (codes in
    jobs/common/rsvp_schema.py; format ``<code>: <detail>``).
    """
    parse_schema = _parse_schema()

    def transform(df: DataFrame) -> DataFrame:
        parsed = (df.withColumn("_raw", F.col("value").cast("string"))
                  .withColumn("_v", F.expr("try_parse_json(_raw)"))
                  .withColumn("rsvp", F.from_json("_raw", parse_schema,
                                                  {"columnNameOfCorruptRecord": CORRUPT})))
        r, v, kafka_ms = F.col("rsvp"), F.col("_v"), F.unix_millis(F.col("timestamp"))
        not_string = F.lit(False)
        for _, bad in _not_strings(v):
            not_string = not_string | bad
        checked = parsed.withColumns({"_missing": _missing(r), "_invalid": _invalid_values(r),
                                      "_late_time": _bad_time(r, kafka_ms, rules)})
        size = F.octet_length(F.col("value"))
        reason = (
            F.when(size > rules.max_record_bytes, _reason(
                schema.OVERSIZE, F.concat(size.cast("string"),
                                          F.lit(f" bytes > max_record_bytes {rules.max_record_bytes}"))))
            .when(v.isNull(), _reason(schema.INVALID_JSON, F.lit("the value is not valid JSON")))
            .when(~F.schema_of_variant(v).startswith("OBJECT"), _reason(
                schema.NOT_AN_OBJECT, F.lit("expected a JSON object")))
            .when(r.getField(CORRUPT).isNotNull() | not_string,
                  _reason(schema.WRONG_TYPE, _wrong_types(r, F.col("_raw"), v)))
            .when(F.col("_missing") != "", _reason(schema.MISSING_FIELD, F.col("_missing")))
            .when(F.col("_invalid") != "", _reason(schema.INVALID_VALUE, F.col("_invalid")))
            .otherwise(_reason(schema.BAD_EVENT_TIME, F.col("_late_time")))
        )
        return (checked.withColumn("reason", reason)
                .drop("_raw", "_v", "_missing", "_invalid", "_late_time"))

    return transform


def valid(df: DataFrame) -> DataFrame:
    """Rows of a parsed DataFrame that passed every rule."""
    return df.where(F.col("reason").isNull())


def invalid(df: DataFrame) -> DataFrame:
    """Rows of a parsed DataFrame that go to the dead-letter topic."""
    return df.where(F.col("reason").isNotNull())


def normalize_city(city: Column) -> Column:
    """Collapse whitespace (tabs and newlines too), trim, title case."""
    return F.initcap(F.trim(F.regexp_replace(city, r"\s+", " ")))


def analyzed(watermark_ms: int | None) -> Transform:
    """Valid parsed rows -> the normalized analyzed columns (docs/streaming.md, version 1).

    ``late`` is true when the event time is below ``watermark_ms`` (None: no watermark yet).
    """

    def transform(df: DataFrame) -> DataFrame:
        r = F.col("rsvp")
        lat, lon = _coordinates(r)
        late = F.lit(False) if watermark_ms is None else r.mtime < F.lit(watermark_ms)
        kafka_ms = F.unix_millis(F.col("timestamp"))
        return df.select(
            F.lit(ANALYZED_SCHEMA_VERSION).alias("schema_version"),
            r.rsvp_id.alias("rsvp_id"),
            r.mtime.alias("event_time_ms"),
            F.date_format(F.timestamp_millis(r.mtime), "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias("event_time"),
            r.event.event_id.alias("event_id"),
            r.event.event_name.alias("event_name"),
            r.group.group_id.alias("group_id"),
            r.group.group_name.alias("group_name"),
            r.member.member_id.alias("member_id"),
            r.response.alias("response"),
            r.guests.alias("guests"),
            F.array_distinct(r.group.group_topics.topic_name).alias("topics"),
            normalize_city(r.group.group_city).alias("city"),
            F.upper(F.trim(r.group.group_country)).alias("country"),
            r.group.group_state.alias("state"),
            lat.alias("lat"),
            lon.alias("lon"),
            r.venue.venue_id.alias("venue_id"),
            F.col("topic").alias("source_topic"),
            F.col("partition").alias("source_partition"),
            F.col("offset").alias("source_offset"),
            kafka_ms.alias("kafka_timestamp_ms"),
            (kafka_ms - r.mtime).alias("ingest_lag_ms"),
            late.alias("late"),
        )

    return transform


def analyzed_records(topic: str) -> Transform:
    """Analyzed rows -> Kafka sink columns: key ``event_id``, value the JSON record."""

    def transform(df: DataFrame) -> DataFrame:
        return df.select(
            F.lit(topic).alias("topic"),
            F.col("event_id").cast("binary").alias("key"),
            F.to_json(F.struct(*df.columns), {"ignoreNullFields": "false"}).cast("binary").alias("value"),
        )

    return transform


MAX_DLQ_VALUE_BYTES = 1 << 20


def dead_letters(topic: str) -> Transform:
    """Invalid parsed rows -> Kafka sink columns: the original bytes and reason headers."""

    def transform(df: DataFrame) -> DataFrame:
        size = F.octet_length("value")
        source = F.concat_ws("/", "topic", F.col("partition").cast("string"), F.col("offset").cast("string"))
        header = lambda name, value: F.struct(F.lit(name).alias("key"),  # noqa: E731
                                               value.cast("binary").alias("value"))
        headers = [
            header("kappa.reason", F.col("reason")),
            header("kappa.source", F.concat(F.lit("stream:"), source)),
            header("kappa.source_topic", F.col("topic")),
            header("kappa.source_partition", F.col("partition").cast("string")),
            header("kappa.source_offset", F.col("offset").cast("string")),
        ]
        oversize = header("kappa.original_bytes", size.cast("string"))
        return df.select(
            F.lit(topic).alias("topic"),
            F.col("key"),
            F.when(size > MAX_DLQ_VALUE_BYTES, F.substring("value", 1, MAX_DLQ_VALUE_BYTES))
            .otherwise(F.col("value")).alias("value"),
            F.when(size > MAX_DLQ_VALUE_BYTES, F.array(*headers, oversize))
            .otherwise(F.array(*headers)).alias("headers"),
        )

    return transform


def reason_code(df: DataFrame) -> DataFrame:
    """Add ``reason_code``: the text of ``reason`` before the first colon."""
    return df.withColumn("reason_code", F.substring_index("reason", ":", 1))
