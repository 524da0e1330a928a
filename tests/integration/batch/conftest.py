"""The batch tests' shared platform: two days of generated RSVPs through the collector, the
streaming job and the loader, built once for the tests of this folder that ask for it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from tests.integration.batch.expected import Line, rsvp_lines, two_days_before
from tests.integration.batch.pipeline import Platform, new_platform

COUNT = 300


@dataclass
class Ran:
    """A platform that ran over ``lines``; ``dates``: the three dates of its batch tables
    (the two of the events, then today's, the dead letters' Kafka date)."""

    platform: Platform
    lines: list[Line]
    start_ms: int
    dates: list[date]
    loads: list[Any]


@pytest.fixture(scope="package")
def batch_platform(stack, kappa_env, spark, tmp_path_factory) -> Iterator[Ran]:
    """Generated lines collected, streamed (Redis, rsvps.analyzed, summaries, dead letters) and
    loaded into a lake of their own; shared, so tests only add to it what stays consistent."""
    today = datetime.now(UTC).date()
    start_ms, span_ms = two_days_before(today)
    lines = rsvp_lines(COUNT, start_ms, span_ms)
    with new_platform(kappa_env, tmp_path_factory.mktemp("platform")) as platform:
        platform.collect([line.value for line in lines])
        platform.stream()
        loads = platform.load(spark)
        yield Ran(platform, lines, start_ms, [today - timedelta(days=n) for n in (2, 1, 0)], loads)
