"""REST endpoints: the current live summaries, read from Redis (key scheme: docs/streaming.md)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from pydantic import BaseModel

from jobs.serve.errors import RESPONSES, ErrorBody
from jobs.serve.service import Service


async def _view_ready(request: Request) -> None:
    """503 ``rebuilding`` while the served view has no Redis data and another one is being built."""
    message = request.app.state.service.rebuilding
    if message:
        raise HTTPException(503, message, headers={"Retry-After": "30"})


router = APIRouter(prefix="/api/v1", tags=["summaries"], responses=RESPONSES,
                   dependencies=[Depends(_view_ready)])
NO_WINDOW: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "no such window (expired or never written)"}}
HLL_STANDARD_ERROR = 0.0081
MAX_LIMIT = 1000

Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="how many items, largest first")]
Windows = Annotated[int | None, Query(ge=1, le=1000, description="how many of the latest windows "
                                      "(default serve.default_windows)")]
WindowStart = Annotated[int | None, Query(ge=0, description="one window, by its start (epoch ms)")]


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


def _service(request: Request) -> Service:
    return request.app.state.service


def _items(pairs: list[tuple[str, float]]) -> list[Item]:
    return [Item(item=name, count=int(score)) for name, score in pairs]


async def _require_window(service: Service, kind: str, start: int) -> None:
    """404 when no ``<kind>`` window starts at ``start`` (in the same words for every endpoint)."""
    if not await service.redis.exists(f"{service.prefix}:{kind}:{start}"):
        raise HTTPException(404, f"no {kind} window starts at {start} (expired or never written); "
                                 f"leave out window_start_ms for the latest ones")


async def _windows(service: Service, index: str, start: int | None, count: int | None) -> list[int]:
    if start is not None:
        await _require_window(service, index, start)
        return [start]
    wanted = count or service.cfg.serve.default_windows
    members = await service.redis.zrevrange(f"{service.prefix}:{index}:windows", 0, wanted - 1)
    return [int(float(member)) for member in members]


@router.get("/topics/top", response_model=TopTopics)
async def top_topics(request: Request, limit: Limit = 10) -> TopTopics:
    """All-time top topics by RSVP count (``kappa:topics:all``)."""
    service = _service(request)
    key = f"{service.prefix}:topics:all"
    async with service.redis.pipeline(transaction=False) as pipe:
        pipe.zrevrange(key, 0, limit - 1, withscores=True)
        pipe.zcard(key)
        pairs, distinct = await pipe.execute()
    return TopTopics(items=_items(pairs), distinct_topics=distinct)


@router.get("/topics/trending", response_model=Trending, responses=NO_WINDOW)
async def trending(request: Request, limit: Limit = 10, window_start_ms: WindowStart = None) -> Trending:
    """Trending topics: the top topics of the latest (or the given) sliding window."""
    service = _service(request)
    starts = await _windows(service, "trending", window_start_ms, 1)
    if not starts:
        return Trending(window_start_ms=None, window_end_ms=None, items=[])
    start = starts[0]
    key = f"{service.prefix}:trending:{start}"
    pairs = await service.redis.zrevrange(key, 0, limit - 1, withscores=True)
    length_ms = int(service.cfg.streaming.params["trending_window_s"]) * 1000
    return Trending(window_start_ms=start, window_end_ms=start + length_ms, items=_items(pairs))


@router.get("/cities", response_model=CityWindows, responses=NO_WINDOW)
async def cities(request: Request, windows: Windows = None, window_start_ms: WindowStart = None,
                 city: Annotated[list[str] | None, Query(description="only these cities")] = None,
                 limit: Limit = 50) -> CityWindows:
    """RSVPs per city in the latest tumbling windows (``kappa:cities:<start>``), newest first."""
    service = _service(request)
    starts = await _windows(service, "cities", window_start_ms, windows)
    async with service.redis.pipeline(transaction=False) as pipe:
        for start in starts:
            pipe.hgetall(f"{service.prefix}:cities:{start}")
        hashes: list[dict[str, Any]] = await pipe.execute() if starts else []
    wanted = {" ".join(c.split()).casefold() for c in city or []}
    length_ms = int(service.cfg.streaming.params["city_window_s"]) * 1000
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
    service = _service(request)
    starts = await _windows(service, "members", window_start_ms, windows)
    async with service.redis.pipeline(transaction=False) as pipe:
        for start in starts:
            pipe.pfcount(f"{service.prefix}:members:{start}")
        pipe.pfcount(f"{service.prefix}:members:all")
        counts = await pipe.execute()
    length_ms = int(service.cfg.streaming.params["members_window_s"]) * 1000
    return Members(windows=[MembersWindow(window_start_ms=s, window_end_ms=s + length_ms, approx_distinct=c)
                            for s, c in zip(starts, counts[:-1], strict=True)],
                   all_time_approx_distinct=counts[-1])


@router.get("/events/{event_id}", response_model=EventResponses,
            responses={404: {"model": ErrorBody, "description": "unknown or expired event"}})
async def event(request: Request, event_id: Annotated[str, Path(max_length=200)]) -> EventResponses:
    """Yes/no responses and guests of one event (``kappa:event:<event_id>``)."""
    service = _service(request)
    fields = await service.redis.hgetall(f"{service.prefix}:event:{event_id}")
    if not fields:
        raise HTTPException(404, f"no responses for event {event_id!r} (unknown, or expired after "
                                 f"streaming.params.event_ttl_s)")
    return EventResponses(event_id=event_id, event_name=fields.get("event_name"),
                          yes=int(fields.get("yes", 0)), no=int(fields.get("no", 0)),
                          guests=int(fields.get("guests", 0)))
