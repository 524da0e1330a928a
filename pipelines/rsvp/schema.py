"""The RSVP record schema, in one place, as plain Python.

The shape follows the Meetup RSVP stream JSON. The collector checks an RSVP's structure only
(:func:`check_structure`: the limits of :mod:`jobs.pipelines.structure`, then :func:`check_record`:
a JSON object, required top-level keys, types of ``rsvp_id`` and ``mtime``); business rules
belong to the streaming job. Spark jobs derive their ``StructType`` from
:data:`RSVP_FIELDS` with :func:`to_struct_type`; :func:`type_errors` checks a parsed record
against the whole tree (tests, generator, downstream quality checks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.pipelines import structure
from jobs.pipelines.structure import (  # noqa: F401 (re-exported: the streaming job reads them here)
    EMPTY_BATCH,
    INVALID_JSON,
    LONG_MAX,
    LONG_MIN,
    MAX_NESTING,
    MISSING_FIELD,
    NOT_AN_OBJECT,
    NUMBER_TOO_LONG,
    OVERSIZE,
    REASON_CODES,
    STRICT_DECODER,
    TOO_DEEP,
    WRONG_TYPE,
    RecordCheck,
    StructureCheck,
    json_type,
    parser_limits,
    short,
)

KEY_FIELD = "rsvp_id"
TIME_FIELD = "mtime"


@dataclass(frozen=True)
class Field:
    """One field of the schema.

    Attributes:
        name: the JSON key.
        type: ``string``, ``long``, ``double``, ``struct`` or ``array`` (of ``fields`` structs).
        required: whether a valid record always carries the key (with a non-null value).
        fields: children of a struct, or of the struct elements of an array.
    """

    name: str
    type: str
    required: bool = True
    fields: tuple[Field, ...] = ()


RSVP_FIELDS: tuple[Field, ...] = (
    Field("venue", "struct", required=False, fields=(
        Field("venue_name", "string"), Field("lon", "double"), Field("lat", "double"),
        Field("venue_id", "long"))),
    Field("visibility", "string"),
    Field("response", "string"),
    Field("guests", "long"),
    Field("member", "struct", fields=(
        Field("member_id", "long"), Field("photo", "string", required=False),
        Field("member_name", "string"))),
    Field("rsvp_id", "long"),
    Field("mtime", "long"),
    Field("event", "struct", fields=(
        Field("event_name", "string"), Field("event_id", "string"), Field("time", "long"),
        Field("event_url", "string"))),
    Field("group", "struct", fields=(
        Field("group_topics", "array", fields=(Field("urlkey", "string"), Field("topic_name", "string"))),
        Field("group_city", "string"), Field("group_country", "string"),
        Field("group_state", "string", required=False), Field("group_id", "long"),
        Field("group_name", "string"), Field("group_urlname", "string"),
        Field("group_lat", "double"), Field("group_lon", "double"))),
)

REQUIRED_TOP_LEVEL: tuple[str, ...] = tuple(f.name for f in RSVP_FIELDS if f.required)
"""Top-level keys every record must carry; the collector rejects a record missing any."""

RESPONSES = ("yes", "no")
"""Values of ``response`` in the source stream (checked downstream, not by the collector)."""

# Reason codes of the streaming job's business rules (docs/streaming.md): values outside their
# domain, absurd event times, and the side-output label of records behind the watermark.
INVALID_VALUE = "invalid_value"
BAD_EVENT_TIME = "bad_event_time"
LATE = "late"
STREAM_REASON_CODES = (*REASON_CODES, INVALID_VALUE, BAD_EVENT_TIME)


def check_structure(raw: bytes, max_bytes: int, check: RecordCheck | None = None) -> StructureCheck:
    """:func:`jobs.pipelines.structure.check_structure`, with :func:`check_record` (an RSVP's) by default."""
    return structure.check_structure(raw, max_bytes, check or check_record)


def check_record(record: Any) -> StructureCheck:
    """Structural checks of an already parsed record (see :func:`check_structure`)."""
    if not isinstance(record, dict):
        return StructureCheck(None, f"{NOT_AN_OBJECT}: expected a JSON object, found "
                                    f"{json_type(record)}")
    if None in map(record.get, REQUIRED_TOP_LEVEL):
        missing = [name for name in REQUIRED_TOP_LEVEL if record.get(name) is None]
        return StructureCheck(None, f"{MISSING_FIELD}: {', '.join(missing)}")
    key, mtime = record[KEY_FIELD], record[TIME_FIELD]
    if type(key) is not int or type(mtime) is not int:  # exact type: bool is not an integer here
        name, value = (KEY_FIELD, key) if type(key) is not int else (TIME_FIELD, mtime)
        return StructureCheck(None, f"{WRONG_TYPE}: {name} must be an integer, found "
                                    f"{json_type(value)} {short(value)}")
    for name, value in ((KEY_FIELD, key), (TIME_FIELD, mtime)):
        if not LONG_MIN <= value <= LONG_MAX:
            return StructureCheck(None, f"{WRONG_TYPE}: {name} must fit a 64-bit long, found "
                                        f"{short(value)}")
    return StructureCheck(str(key).encode(), None)


def type_errors(record: Any, fields: tuple[Field, ...] = RSVP_FIELDS, path: str = "") -> list[str]:
    """Every deviation of a parsed record from the full schema (empty when it conforms)."""
    if not isinstance(record, dict):
        return [f"{path.rstrip('.') or '(record)'}: expected object, found {json_type(record)}"]
    errors: list[str] = []
    for field in fields:
        where = f"{path}{field.name}"
        value = record.get(field.name)
        if value is None:
            if field.required:
                errors.append(f"{where}: missing")
            continue
        if field.type == "struct":
            errors.extend(type_errors(value, field.fields, f"{where}."))
        elif field.type == "array":
            if not isinstance(value, list):
                errors.append(f"{where}: expected array, found {json_type(value)}")
                continue
            for index, item in enumerate(value):
                errors.extend(type_errors(item, field.fields, f"{where}[{index}]."))
        elif not _CHECKS[field.type](value):
            errors.append(f"{where}: expected {field.type}, found {json_type(value)}")
    return errors


def to_struct_type(fields: tuple[Field, ...] = RSVP_FIELDS):
    """The Spark ``StructType`` of the schema (imports pyspark only when called)."""
    from pyspark.sql import types as T

    atomic = {"string": T.StringType(), "long": T.LongType(), "double": T.DoubleType()}

    def spark_type(field: Field):
        if field.type == "struct":
            return to_struct_type(field.fields)
        if field.type == "array":
            return T.ArrayType(to_struct_type(field.fields), containsNull=False)
        return atomic[field.type]

    return T.StructType([T.StructField(f.name, spark_type(f), nullable=True) for f in fields])


def _is_long(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_double(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_CHECKS = {"string": lambda v: isinstance(v, str), "long": _is_long, "double": _is_double}
