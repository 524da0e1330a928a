"""The RSVP pipeline's REST endpoints: its live summaries, read from Redis (key scheme: docs/streaming.md).

``kappa serve`` mounts :data:`router` under ``/api/v1`` (``pipeline.routes`` in pipeline.py), so
``GET /topics/top`` here is ``GET /api/v1/topics/top``. Keys are read under the served view
version's prefix (``service.prefix``, ``kappa`` for version 1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request
from pydantic import BaseModel

from jobs.serve.errors import ErrorBody
from jobs.serve.rest import NO_WINDOW, Limit, Windows, WindowStart, service
from pipelines.rsvp.aggregates import windows_from

if TYPE_CHECKING:
    from jobs.serve.service import Service

router = APIRouter(tags=["summaries"])
HLL_STANDARD_ERROR = 0.0081


class Item(BaseModel):
    """One entry of a top-N list (counts are exact: Redis sorted sets hold every topic)."""

    item: str
    count: int
    error: int = 0


class TopTopics(BaseModel):
    """All-time top topics."""

    items: list[Item]
    distinct_topics: int


class Trending(BaseModel):
    """Top topics of one sliding window (the latest unless one is asked for)."""

    window_start_ms: int | None
    window_end_ms: int | None
    items: list[Item]


class CityCount(BaseModel):
    """RSVPs of one city in one window."""

    city: str
    count: int


class CityWindow(BaseModel):
    """Per-city RSVP counts of one tumbling window, largest first."""

    window_start_ms: int
    window_end_ms: int
    total: int
    cities: list[CityCount]


class CityWindows(BaseModel):
    """The latest windows, newest first."""

    windows: list[CityWindow]


class MembersWindow(BaseModel):
    """Distinct members of one window (HyperLogLog: standard error 0.81 %)."""

    window_start_ms: int
    window_end_ms: int
    approx_distinct: int
    error: float = HLL_STANDARD_ERROR


class Members(BaseModel):
    """Distinct members per window, newest first, and over all time."""

    windows: list[MembersWindow]
    all_time_approx_distinct: int
    error: float = HLL_STANDARD_ERROR


class EventResponses(BaseModel):
    """One event's RSVP responses (all time)."""

    event_id: str
    event_name: str | None
    yes: int
    no: int
    guests: int


def _items(pairs: list[tuple[str, float]]) -> list[Item]:
    return [Item(item=name, count=int(score)) for name, score in pairs]


async def _require_window(served: Service, kind: str, start: int) -> None:
    """404 when no ``<kind>`` window starts at ``start`` (in the same words for every endpoint)."""
    if not await served.redis.exists(f"{served.prefix}:{kind}:{start}"):
        raise HTTPException(404, f"no {kind} window starts at {start} (expired or never written); "
                                 f"leave out window_start_ms for the latest ones")


async def _windows(served: Service, index: str, start: int | None, count: int | None) -> list[int]:
    if start is not None:
        await _require_window(served, index, start)
        return [start]
    wanted = count or served.cfg.serve.default_windows
    members = await served.redis.zrevrange(f"{served.prefix}:{index}:windows", 0, wanted - 1)
    return [int(float(member)) for member in members]


@router.get("/topics/top", response_model=TopTopics)
async def top_topics(request: Request, limit: Limit = 10) -> TopTopics:
    """All-time top topics by RSVP count (``kappa:topics:all``)."""
    served = service(request)
    key = f"{served.prefix}:topics:all"
    async with served.redis.pipeline(transaction=False) as pipe:
        pipe.zrevrange(key, 0, limit - 1, withscores=True)
        pipe.zcard(key)
        pairs, distinct = await pipe.execute()
    return TopTopics(items=_items(pairs), distinct_topics=distinct)


@router.get("/topics/trending", response_model=Trending, responses=NO_WINDOW)
async def trending(request: Request, limit: Limit = 10, window_start_ms: WindowStart = None) -> Trending:
    """Trending topics: the top topics of the latest (or the given) sliding window."""
    served = service(request)
    starts = await _windows(served, "trending", window_start_ms, 1)
    if not starts:
        return Trending(window_start_ms=None, window_end_ms=None, items=[])
    start = starts[0]
    key = f"{served.prefix}:trending:{start}"
    pairs = await served.redis.zrevrange(key, 0, limit - 1, withscores=True)
    length_ms = windows_from(served.cfg).trending_ms
    return Trending(window_start_ms=start, window_end_ms=start + length_ms, items=_items(pairs))


@router.get("/cities", response_model=CityWindows, responses=NO_WINDOW)
async def cities(request: Request, windows: Windows = None, window_start_ms: WindowStart = None,
                 city: Annotated[list[str] | None, Query(description="only these cities")] = None,
                 limit: Limit = 50) -> CityWindows:
    """RSVPs per city in the latest tumbling windows (``kappa:cities:<start>``), newest first."""
    served = service(request)
    starts = await _windows(served, "cities", window_start_ms, windows)
    async with served.redis.pipeline(transaction=False) as pipe:
        for start in starts:
            pipe.hgetall(f"{served.prefix}:cities:{start}")
        hashes: list[dict[str, Any]] = await pipe.execute() if starts else []
    wanted = {" ".join(c.split()).casefold() for c in city or []}
    length_ms = windows_from(served.cfg).city_ms
    out = []
    for start, counts in zip(starts, hashes, strict=True):
        rows = sorted(((name, int(value)) for name, value in counts.items()), key=lambda r: (-r[1], r[0]))
        total = sum(count for _, count in rows)
        if wanted:
            rows = [row for row in rows if row[0].casefold() in wanted]
        out.append(CityWindow(window_start_ms=start, window_end_ms=start + length_ms, total=total,
                              cities=[CityCount(city=name, count=count) for name, count in rows[:limit]]))
    return CityWindows(windows=out)


@router.get("/members", response_model=Members, responses=NO_WINDOW)
async def members(request: Request, windows: Windows = None,
                  window_start_ms: WindowStart = None) -> Members:
    """Approximate distinct members per tumbling window and all time (HyperLogLog)."""
    served = service(request)
    starts = await _windows(served, "members", window_start_ms, windows)
    async with served.redis.pipeline(transaction=False) as pipe:
        for start in starts:
            pipe.pfcount(f"{served.prefix}:members:{start}")
        pipe.pfcount(f"{served.prefix}:members:all")
        counts = await pipe.execute()
    length_ms = windows_from(served.cfg).members_ms
    return Members(windows=[MembersWindow(window_start_ms=s, window_end_ms=s + length_ms, approx_distinct=c)
                            for s, c in zip(starts, counts[:-1], strict=True)],
                   all_time_approx_distinct=counts[-1])


@router.get("/events/{event_id}", response_model=EventResponses,
            responses={404: {"model": ErrorBody, "description": "unknown or expired event"}})
async def event(request: Request, event_id: Annotated[str, Path(max_length=200)]) -> EventResponses:
    """Yes/no responses and guests of one event (``kappa:event:<event_id>``)."""
    served = service(request)
    fields = await served.redis.hgetall(f"{served.prefix}:event:{event_id}")
    if not fields:
        raise HTTPException(404, f"no responses for event {event_id!r} (unknown, or expired after "
                                 f"streaming.params.event_ttl_s)")
    return EventResponses(event_id=event_id, event_name=fields.get("event_name"),
                          yes=int(fields.get("yes", 0)), no=int(fields.get("no", 0)),
                          guests=int(fields.get("guests", 0)))
