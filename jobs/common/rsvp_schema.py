"""The RSVP record schema, in one place, as plain Python.

The shape follows the Meetup RSVP stream JSON. The collector uses :func:`check_structure` (valid
JSON object, required top-level keys, types of ``rsvp_id`` and ``mtime``, size) and nothing
else: business rules belong to the streaming job. Spark jobs derive their ``StructType`` from
:data:`RSVP_FIELDS` with :func:`to_struct_type`; :func:`type_errors` checks a parsed record
against the whole tree (tests, generator, downstream quality checks).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


STRICT_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
"""Python's JSON decoder without its extensions ``NaN``, ``Infinity`` and ``-Infinity``: the
collector and the streaming job refuse the same documents (``invalid_json``)."""
_decode = STRICT_DECODER.decode

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

# Rejection reason codes: the text before ':' in every reason (metrics label, DLQ header).
OVERSIZE = "oversize"
INVALID_JSON = "invalid_json"
NOT_AN_OBJECT = "not_an_object"
MISSING_FIELD = "missing_field"
WRONG_TYPE = "wrong_type"
TOO_DEEP = "too_deep"
NUMBER_TOO_LONG = "number_too_long"
EMPTY_BATCH = "empty_batch"
REASON_CODES = (OVERSIZE, INVALID_JSON, NOT_AN_OBJECT, MISSING_FIELD, WRONG_TYPE, TOO_DEEP,
                NUMBER_TOO_LONG, EMPTY_BATCH)

MAX_NESTING = 32
"""Deepest nesting of arrays and objects a record may have (an RSVP has 4); checked before parsing."""
MAX_NUMBER_DIGITS = 100
"""Longest run of digits in a number (a long has 19); longer ones are refused before parsing."""
_QUOTED = re.compile(rb'"[^"]*"')
_LONG_DIGITS = re.compile(rb"[0-9]{%d}" % (MAX_NUMBER_DIGITS + 1))
_DIGITS_AS_ZERO = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_DIGIT_RUN = b"0" * (MAX_NUMBER_DIGITS + 1)
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
_NOT_STRUCTURE = bytes(set(range(256)) - set(b'"[]{}'))
_OPENERS = bytes.maketrans(b"{}", b"[]")

# Reason codes of the streaming job's business rules (docs/streaming.md): values outside their
# domain, absurd event times, and the side-output label of records behind the watermark.
INVALID_VALUE = "invalid_value"
BAD_EVENT_TIME = "bad_event_time"
LATE = "late"
STREAM_REASON_CODES = (*REASON_CODES, INVALID_VALUE, BAD_EVENT_TIME)


@dataclass(frozen=True)
class StructureCheck:
    """The outcome of :func:`check_structure`: a Kafka key, or the reason for rejection."""

    key: bytes | None
    reason: str | None

    @property
    def ok(self) -> bool:
        """True when the record passed."""
        return self.reason is None

    @property
    def code(self) -> str | None:
        """The reason's code (``invalid_json``, ``oversize``, ...) or None."""
        return self.reason.split(":", 1)[0] if self.reason else None


def check_structure(raw: bytes, max_bytes: int,
                    check: Callable[[Any], StructureCheck] | None = None) -> StructureCheck:
    """Structural checks of one serialized record, as the collector applies them.

    Args:
        raw: the record's bytes (one JSON document, no trailing newline).
        max_bytes: the largest accepted record.
        check: the checks of the parsed record (default :func:`check_record`, an RSVP's).

    Returns:
        A check whose ``key`` is the Kafka key (``rsvp_id`` as decimal bytes) when valid.
    """
    if len(raw) > max_bytes:
        return StructureCheck(None, f"{OVERSIZE}: {len(raw)} bytes > max_record_bytes {max_bytes}")
    unsafe = parser_limits(raw)
    if unsafe is not None:
        return StructureCheck(None, unsafe)
    try:
        record = _decode(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        return StructureCheck(None, f"{INVALID_JSON}: {exc}")
    return (check or check_record)(record)


def parser_limits(raw: bytes, max_nesting: int = MAX_NESTING) -> str | None:
    """The reason a document must not reach the JSON parser (too deep, a too long number), or None.

    Byte operations only, so the answer depends neither on Python's recursion limit nor on
    ``sys.int_max_str_digits``: escaped backslashes and quotes are dropped, so every string is
    a plain ``"..."``; brackets and digits inside strings do not count.
    """
    flat = raw.replace(b"\\\\", b"").replace(b'\\"', b"") if b"\\" in raw else raw
    if _DIGIT_RUN in flat.translate(_DIGITS_AS_ZERO):
        digits = _LONG_DIGITS.search(_QUOTED.sub(b'""', flat))
        if digits is not None:
            return f"{NUMBER_TOO_LONG}: a number with more than {MAX_NUMBER_DIGITS} digits"
    if flat.count(b"[") + flat.count(b"{") <= max_nesting:  # cannot nest deeper: most records
        return None
    structure = _QUOTED.sub(b"", flat.translate(None, _NOT_STRUCTURE)).translate(_OPENERS)
    if _nesting_exceeds(structure, max_nesting):
        return f"{TOO_DEEP}: arrays and objects nested deeper than {max_nesting} levels"
    return None


def _nesting_exceeds(brackets: bytes, limit: int) -> bool:
    """Whether a sequence of ``[`` and ``]`` nests deeper than ``limit``.

    Each pass removes every innermost ``[]`` pair, which lowers the deepest nesting by exactly
    one, so ``limit`` passes empty any sequence that is not deeper (unbalanced leftovers are
    the JSON parser's to report).
    """
    if b"[" * (limit + 1) in brackets:
        return True
    for _ in range(limit):
        if b"[]" not in brackets:
            return False
        brackets = brackets.replace(b"[]", b"")
    return b"[]" in brackets


def keyed_object(field: str | None) -> Callable[[Any], StructureCheck]:
    """The checks of any pipeline's record: a JSON object, keyed by its ``field`` when one is named.

    The pipeline's own parser validates the rest, behind the collector.
    """

    def check(record: Any) -> StructureCheck:
        if not isinstance(record, dict):
            return StructureCheck(None, f"{NOT_AN_OBJECT}: expected a JSON object, found "
                                        f"{_json_type(record)}")
        if field is None:
            return StructureCheck(None, None)
        value = record.get(field)
        if value is None or isinstance(value, dict | list):
            return StructureCheck(None, f"{MISSING_FIELD}: {field} (the Kafka key: a string or a number)")
        return StructureCheck((value if isinstance(value, str) else json.dumps(value)).encode(), None)

    return check


def check_record(record: Any) -> StructureCheck:
    """Structural checks of an already parsed record (see :func:`check_structure`)."""
    if not isinstance(record, dict):
        return StructureCheck(None, f"{NOT_AN_OBJECT}: expected a JSON object, found "
                                    f"{_json_type(record)}")
    if None in map(record.get, REQUIRED_TOP_LEVEL):
        missing = [name for name in REQUIRED_TOP_LEVEL if record.get(name) is None]
        return StructureCheck(None, f"{MISSING_FIELD}: {', '.join(missing)}")
    key, mtime = record[KEY_FIELD], record[TIME_FIELD]
    if type(key) is not int or type(mtime) is not int:  # exact type: bool is not an integer here
        name, value = (KEY_FIELD, key) if type(key) is not int else (TIME_FIELD, mtime)
        return StructureCheck(None, f"{WRONG_TYPE}: {name} must be an integer, found "
                                    f"{_json_type(value)} {_short(value)}")
    for name, value in ((KEY_FIELD, key), (TIME_FIELD, mtime)):
        if not LONG_MIN <= value <= LONG_MAX:
            return StructureCheck(None, f"{WRONG_TYPE}: {name} must fit a 64-bit long, found "
                                        f"{_short(value)}")
    return StructureCheck(str(key).encode(), None)


def type_errors(record: Any, fields: tuple[Field, ...] = RSVP_FIELDS, path: str = "") -> list[str]:
    """Every deviation of a parsed record from the full schema (empty when it conforms)."""
    if not isinstance(record, dict):
        return [f"{path.rstrip('.') or '(record)'}: expected object, found {_json_type(record)}"]
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
                errors.append(f"{where}: expected array, found {_json_type(value)}")
                continue
            for index, item in enumerate(value):
                errors.extend(type_errors(item, field.fields, f"{where}[{index}]."))
        elif not _CHECKS[field.type](value):
            errors.append(f"{where}: expected {field.type}, found {_json_type(value)}")
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


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
             float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _short(value: Any, limit: int = 40) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
