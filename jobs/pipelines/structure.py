"""Structural checks of one serialized record, as the collector applies them to any pipeline's.

One JSON document within the parser's limits (size, nesting, number length), decoded strictly
(no ``NaN`` or ``Infinity``), then the pipeline's check of the parsed record: by default
:func:`keyed_object`, a JSON object carrying the pipeline's Kafka key field. The reason of a
rejection starts with one of :data:`REASON_CODES` (the metrics label and the DLQ header).
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
"""Deepest nesting of arrays and objects a record may have; checked before parsing."""
MAX_NUMBER_DIGITS = 100
"""Longest run of digits in a number (a long has 19); longer ones are refused before parsing."""
_QUOTED = re.compile(rb'"[^"]*"')
_LONG_DIGITS = re.compile(rb"[0-9]{%d}" % (MAX_NUMBER_DIGITS + 1))
_DIGITS_AS_ZERO = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_DIGIT_RUN = b"0" * (MAX_NUMBER_DIGITS + 1)
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
_NOT_STRUCTURE = bytes(set(range(256)) - set(b'"[]{}'))
_OPENERS = bytes.maketrans(b"{}", b"[]")


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


RecordCheck = Callable[[Any], StructureCheck]
"""The check of a parsed record: its Kafka key, or the reason for rejection."""


def check_structure(raw: bytes, max_bytes: int, check: RecordCheck) -> StructureCheck:
    """Structural checks of one serialized record, as the collector applies them.

    Args:
        raw: the record's bytes (one JSON document, no trailing newline).
        max_bytes: the largest accepted record.
        check: the pipeline's checks of the parsed record.

    Returns:
        A check whose ``key`` is the Kafka key when valid.
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
    return check(record)


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


def keyed_object(field: str | None) -> RecordCheck:
    """The checks of any pipeline's record: a JSON object, keyed by its ``field`` when one is named.

    The pipeline's own parser validates the rest, behind the collector.
    """

    def check(record: Any) -> StructureCheck:
        if not isinstance(record, dict):
            return StructureCheck(None, f"{NOT_AN_OBJECT}: expected a JSON object, found "
                                        f"{json_type(record)}")
        if field is None:
            return StructureCheck(None, None)
        value = record.get(field)
        if value is None or isinstance(value, dict | list):
            return StructureCheck(None, f"{MISSING_FIELD}: {field} (the Kafka key: a string or a number)")
        return StructureCheck((value if isinstance(value, str) else json.dumps(value)).encode(), None)

    return check


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (for messages)."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
             float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def short(value: Any, limit: int = 40) -> str:
    """A value as JSON, cut to ``limit`` characters (for messages)."""
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
