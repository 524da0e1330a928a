"""Gold-by-day transforms of the card decisions: pure `DataFrame -> DataFrame` functions."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

MS_PER_DAY = 86_400_000
MS_PER_S = 1000


def _with_event_date(silver: DataFrame) -> DataFrame:
    """Add the UTC date of each decision's event time (independent of the session time zone)."""
    days = F.floor(F.col("event_time_ms") / MS_PER_DAY).cast("int")
    return silver.withColumn("event_date", F.date_from_unix_date(days))


def _flag_rate_by(silver: DataFrame, key: str) -> DataFrame:
    """Transactions, flags (total and per reason) and flag rate per `key` per day."""
    flagged = F.col("flagged")
    return (
        silver.transform(_with_event_date)
        .groupBy("event_date", key)
        .agg(
            F.count(F.lit(1)).alias("transactions"),
            F.sum(F.when(flagged, 1).otherwise(0)).alias("flagged"),
            F.sum(F.when(F.col("reason") == "impossible_travel", 1).otherwise(0)).alias("impossible_travel"),
            F.sum(F.when(F.col("reason") == "amount_over_limit", 1).otherwise(0)).alias("amount_over_limit"),
        )
        .withColumn("flag_rate", F.col("flagged") / F.col("transactions"))
        .select(
            "event_date",
            key,
            F.col("transactions").cast("long"),
            F.col("flagged").cast("long"),
            F.col("impossible_travel").cast("long"),
            F.col("amount_over_limit").cast("long"),
            F.col("flag_rate").cast("double"),
        )
    )


def flags_by_country_daily(silver: DataFrame) -> DataFrame:
    """Per UTC day and country of the point of sale: transactions, flags, flag rate."""
    return _flag_rate_by(silver, "country")


def flags_by_merchant_daily(silver: DataFrame) -> DataFrame:
    """Per UTC day and merchant: transactions, flags, flag rate."""
    return _flag_rate_by(silver, "merchant_id")


def flags_by_country_window(silver: DataFrame, window_s: int = 60) -> DataFrame:
    """What the `flags_by_country` view holds: on-time flags per country per tumbling window.

    Rows the engine marked `late` are left out, as the view leaves them out.
    """
    window_ms = window_s * MS_PER_S
    on_time = ~F.coalesce(F.col("late"), F.lit(False)) if "late" in silver.columns else F.lit(True)
    start = (F.floor(F.col("event_time_ms") / window_ms) * window_ms).cast("long")
    return (
        silver.where(F.col("flagged") & on_time)
        .groupBy(start.alias("window_start_ms"), "country")
        .agg(F.count(F.lit(1)).alias("flagged"))
        .select("window_start_ms", "country", "flagged")
    )
