"""``kappa stream run --from/--to`` bounds: earliest/latest, offsets JSON, timestamps, errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from jobs.errors import ConfigError
from jobs.streaming.cli import parse_bound


@pytest.mark.parametrize(("text", "expected"), [
    (None, None),
    ("earliest", "earliest"),
    (" latest ", "latest"),
    ('{"rsvps.raw": {"0": 100, "1": 5}}', {"rsvps.raw": {"0": 100, "1": 5}}),
    ("2026-01-01T00:00:00Z", datetime(2026, 1, 1, tzinfo=UTC)),
    ("2026-01-01T01:30:00+01:30", datetime(2026, 1, 1, 1, 30, tzinfo=timezone(timedelta(hours=1.5)))),
    ("1767225600123", datetime(2026, 1, 1, 0, 0, 0, 123_000, tzinfo=UTC)),
])
def test_parse_bound(text: str | None, expected: object) -> None:
    assert parse_bound(text, "--from") == expected


def test_a_timestamp_with_an_offset_is_the_same_instant() -> None:
    assert parse_bound("2026-01-01T01:30:00+01:30", "--to") == datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("text", "message"), [
    ('{"rsvps.raw": ', r"--from '\{\"rsvps.raw\":' is not valid JSON \(Expecting value.*\); "
                       r"give an object of topic -> partition -> offset, "
                       r"e\.g\. \{\"<topic>\": \{\"0\": 100\}\}"),
    ("2026-01-01T00:00:00", r"--from '2026-01-01T00:00:00' has no time zone; add Z or \+00:00"),
    ("yesterday", r"--from 'yesterday': expected earliest, latest, offsets JSON, an ISO timestamp"),
    ("-5", r"--from '-5': expected earliest, latest"),
])
def test_parse_bound_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_bound(text, "--from")
