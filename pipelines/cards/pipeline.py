"""The card pipeline's definitions: the rules of `rules.py` and `gold.py` registered with the engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pyspark.sql import DataFrame

from jobs.pipelines import Reject, definitions
from pipelines.cards import gold, rules
from pipelines.cards.schema import ANALYZED, REASONS

pipeline = definitions(__file__)
pipeline.analyzed_schema = ANALYZED
pipeline.reasons = REASONS

_SPEC = yaml.safe_load((Path(__file__).parent / "pipeline.yaml").read_text(encoding="utf-8"))
STATE_TTL_S: int = _SPEC["state"]["ttl_s"]


def _params(params: dict[str, Any] | None) -> rules.CardParams:
    return rules.CardParams.of({"state_ttl_s": STATE_TTL_S, **(params or {})})


@pipeline.parse
def parse(value: bytes, key: bytes | None, params: dict[str, Any]) -> dict[str, Any]:
    """A raw transaction -> typed record; a bad one raises `Reject` with one of `REASONS`."""
    try:
        return rules.parse(value, key, params)
    except rules.CardReject as exc:
        raise Reject(exc.reason, exc.detail) from None


@pipeline.analyze
def analyze(
    record: dict[str, Any], previous: dict[str, Any] | None, params: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Decide a transaction against its card's previous one; the new state is this transaction."""
    return rules.analyze(record, previous, _params(params))


@pipeline.gold("flags_by_country_daily")
def flags_by_country_daily(silver: DataFrame) -> DataFrame:
    """Flag rate per country per day."""
    return gold.flags_by_country_daily(silver)


@pipeline.gold("flags_by_merchant_daily")
def flags_by_merchant_daily(silver: DataFrame) -> DataFrame:
    """Flag rate per merchant per day."""
    return gold.flags_by_merchant_daily(silver)


@pipeline.lake_query("flags_by_country_window")
def flags_by_country_window(silver: DataFrame) -> DataFrame:
    """The `flags_by_country` view recomputed from silver."""
    return gold.flags_by_country_window(silver)
