"""What ``kappa batch reconcile`` compares for the RSVP pipeline (its ``@pipeline.reconciler``).

The RSVP views live under the key scheme of its own streaming job (docs/streaming.md "Redis
keys"), so its reconcile is its own :class:`~jobs.batch.reconcile.ViewsCheck`: the lake's
recomputation (pipelines/rsvp/lake_views.py, from one pinned snapshot of bronze, silver and
ops.dlq) against what Redis holds when read and the mirror of the summaries in ``gold.rsvp_summaries``
(pipelines/rsvp/live.py). Exact summaries (city windows, per-minute topic buckets, trending
windows, event responses, all-time topics, totals) allow no difference; HyperLogLog member
counts allow three standard errors (Redis: 0.81 %). The top-N lists of gold.rsvp_summaries are
compared as lists. What is not compared, and why, is in the report (:data:`NOT_COMPARED`).
Runbook: docs/runbooks/views-drift.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobs.batch.reconcile import HLL_BOUND, LiveSide, ViewsCheck

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.config.load import KappaConfig

WINDOWED = ("city_window", "members_window", "topic_minute", "trending")
ALL_TIME = ("event", "topic", "totals", "members_all")
EXACT = ("city_window", "topic_minute", "trending", "event", "topic", "totals")
APPROXIMATE = ("members_window", "members_all")
TOP_LISTS = ("trending", "topic")
"""Kinds gold.rsvp_summaries holds as top-N lists (``trending/<start>``, ``top_topics``)."""
SUMMARIES_TABLE = "gold.rsvp_summaries"
NOT_COMPARED = (
    {"what": "event name (Redis event hash field event_name, gold event rows)",
     "why": "the name the last batch that counted the event carried: it depends on where the "
            "micro-batches were cut, so it is no function of the log the lake could recompute"},
    {"what": "window keys absent from Redis that started over streaming.window_ttl_s ago",
     "why": "their Redis keys expired as designed (counted in expired_windows_not_compared)"},
    {"what": "fence (<prefix>:fence:summaries), metrics and status hashes, window indexes (*:windows)",
     "why": "the streaming job's bookkeeping (what it applied, its last batches, which windows exist), "
            "not views of the log"},
    {"what": "per-minute topic buckets, totals and all-time distinct members in gold.rsvp_summaries",
     "why": "rsvps.summaries does not carry them; they are compared in Redis"},
)
RANGED_NOT_COMPARED = {
    "what": f"all-time views ({', '.join(ALL_TIME)}) and gold's top_topics",
    "why": "--from/--to compares the windows that start on those dates; the all-time views need "
           "the whole log: run without --from/--to"}


def views_check(spark: SparkSession, cfg: KappaConfig) -> ViewsCheck:
    """The RSVP views: the lake's recomputation against Redis and gold.rsvp_summaries."""
    from pipelines.rsvp.lake_views import lake_views
    from pipelines.rsvp.live import gold_views, redis_views

    return ViewsCheck(
        lake=lambda report, progress: lake_views(spark, cfg, report, progress),
        live={"redis": LiveSide(lambda lake, within: redis_views(cfg, lake, within),
                                expires_s=cfg.streaming.window_ttl_s),
              SUMMARIES_TABLE: LiveSide(lambda lake, within: gold_views(cfg, within),
                                        top_n=cfg.streaming.top_n)},
        bounds={**dict.fromkeys(EXACT, 0.0), **dict.fromkeys(APPROXIMATE, HLL_BOUND)},
        windowed=WINDOWED, top_lists=TOP_LISTS, not_compared=NOT_COMPARED,
        ranged_not_compared=RANGED_NOT_COMPARED)
