"""Deterministic card transactions with planted impossible-travel pairs and amount violations.

Every item says what it is (`kind`), so a test knows the right decision without the rules:
`ok` (approve), `planted_travel` (flag: impossible_travel), `planted_amount` (flag:
amount_over_limit), `malformed:<reason>` (dead letter). Kafka key = card_id.

    python -m pipelines.cards.generator --count 1000 --seed 7 [--malformed-rate 0.01] [--labels]

:func:`lines` is what `kappa generate --pipeline cards` runs (`generator:` in pipeline.yaml).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from itertools import accumulate
from typing import Any

from jobs.pipelines.generate import GenerateOptions

START_MS = 1_793_491_200_000  # 2026-11-01T00:00:00Z
MAX_STEP_MS = 30_000  # the stream clock advances 0-30 s per item
ORDINARY_SPEED_KMH = 60.0  # a card moves between its city's merchants no faster than this
MERCHANTS_PER_CITY = 4
MERCHANT_SPREAD_DEG = 0.1  # about 11 km around the city centre
ORDINARY_MAX = 2_000.0  # ordinary amounts stay far below the limit
DEFAULT_MAX_AMOUNT = 10_000.0

# (city, country, currency, lat, lon)
CITIES: tuple[tuple[str, str, str, float, float], ...] = (
    ("paris", "FR", "EUR", 48.8566, 2.3522),
    ("lyon", "FR", "EUR", 45.7640, 4.8357),
    ("berlin", "DE", "EUR", 52.5200, 13.4050),
    ("munich", "DE", "EUR", 48.1351, 11.5820),
    ("madrid", "ES", "EUR", 40.4168, -3.7038),
    ("london", "GB", "GBP", 51.5074, -0.1278),
    ("newyork", "US", "USD", 40.7128, -74.0060),
    ("sanfrancisco", "US", "USD", 37.7749, -122.4194),
    ("tokyo", "JP", "JPY", 35.6762, 139.6503),
    ("sydney", "AU", "AUD", -33.8688, 151.2093),
)
# City pairs over 5,000 km apart: minutes between them is far above any airliner.
FAR_PAIRS: tuple[tuple[str, str], ...] = (
    ("paris", "newyork"),
    ("berlin", "tokyo"),
    ("london", "sydney"),
    ("madrid", "sanfrancisco"),
    ("munich", "newyork"),
    ("lyon", "tokyo"),
)
PLANTED_GAP_MS = (60_000, 3_600_000)  # 1 to 60 minutes between the two ends of a pair

# One bad message per dead-letter reason: (reason, value).
MALFORMED: tuple[tuple[str, str], ...] = (
    ("invalid_json", '{"txn_id": "t", "card_id": '),
    ("not_an_object", '["card", 1]'),
    ("missing_field", '{"txn_id": "t", "card_id": "%s"}'),
    ("wrong_type", '{"txn_id": "t", "card_id": "%s", "merchant_id": "m", "country": "FR", "lat": "48.8", '
     '"lon": 2.3, "amount": 5.0, "currency": "EUR", "event_time_ms": 1793491200000}'),
    ("invalid_value", '{"txn_id": "t", "card_id": "%s", "merchant_id": "m", "country": "FR", "lat": 123.0, '
     '"lon": 2.3, "amount": 5.0, "currency": "EUR", "event_time_ms": 1793491200000}'),
    ("bad_event_time", '{"txn_id": "t", "card_id": "%s", "merchant_id": "m", "country": "FR", "lat": 48.8, '
     '"lon": 2.3, "amount": 5.0, "currency": "EUR", "event_time_ms": -5}'),
)


@dataclass(frozen=True)
class Item:
    """One generated Kafka message and what it is."""

    key: str | None
    value: str
    kind: str


MAX_MALFORMED_RATE = 0.5


@dataclass(frozen=True)
class Line:
    """One item as `kappa generate` sends it: the value's bytes and the Kafka key."""

    line: bytes
    key: bytes | None
    kind: str


@cache
def merchants() -> dict[str, tuple[str, str, str, float, float]]:
    """Merchant id -> (city, country, currency, lat, lon), fixed for every seed."""
    rng = random.Random(0)
    out = {}
    for city, country, currency, lat, lon in CITIES:
        for i in range(MERCHANTS_PER_CITY):
            dlat = rng.uniform(-MERCHANT_SPREAD_DEG, MERCHANT_SPREAD_DEG)
            dlon = rng.uniform(-MERCHANT_SPREAD_DEG, MERCHANT_SPREAD_DEG)
            out[f"m-{city}-{i}"] = (city, country, currency, round(lat + dlat, 5), round(lon + dlon, 5))
    return out


def _txn(txn_id: str, card: str, merchant: str, amount: float, t_ms: int) -> dict[str, Any]:
    _, country, currency, lat, lon = merchants()[merchant]
    return {
        "txn_id": txn_id, "card_id": card, "merchant_id": merchant, "country": country,
        "lat": lat, "lon": lon, "amount": round(amount, 2), "currency": currency, "event_time_ms": t_ms,
    }  # fmt: skip


def _by_city() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for mid, (city, *_rest) in merchants().items():
        out.setdefault(city, []).append(mid)
    return out


def generate(
    count: int,
    seed: int = 0,
    *,
    cards: int = 200,
    travel_rate: float = 0.02,
    amount_rate: float = 0.01,
    malformed_rate: float = 0.0,
    max_amount: float = DEFAULT_MAX_AMOUNT,
    start_ms: int = START_MS,
    malformed_kinds: tuple[str, ...] | None = None,
) -> Iterator[Item]:
    """Yield `count` items in Kafka order; the same arguments give the same items.

    `malformed_kinds` narrows the bad messages to these dead-letter reasons (None: all of them).
    """
    rng = random.Random(seed)
    malformed = [m for m in MALFORMED if malformed_kinds is None or m[0] in malformed_kinds]
    table, by_city = merchants(), _by_city()
    home = {f"card-{i:05d}": rng.choice(CITIES)[0] for i in range(cards)}
    ids = list(home)
    # Zipf-like: a few cards are busy; summed once (choices() would sum them on every draw)
    cum_weights = list(accumulate(1.0 / (i + 1) for i in range(cards)))
    last: dict[str, tuple[str, int]] = {}
    pending: list[tuple[int, Item]] = []  # second ends of planted pairs, due at a time
    t, n, pairs = start_ms, 0, 0
    while n < count:
        t += rng.randrange(MAX_STEP_MS)
        if pending and (pending[0][0] <= t or count - n <= len(pending)):
            due, item = pending.pop(0)
            t = max(t, due)
            yield item
            n += 1
            continue
        roll = rng.random()
        if roll < malformed_rate:
            reason, text = rng.choice(malformed)
            card = rng.choice(ids)
            yield Item(card, text.replace("%s", card), f"malformed:{reason}")
        elif roll < malformed_rate + travel_rate and count - n - len(pending) >= 2:
            a, b = rng.choice(FAR_PAIRS)
            card, pairs = f"card-T{pairs:05d}", pairs + 1
            first = _txn(f"{card}-1", card, rng.choice(by_city[a]), rng.uniform(5, 500), t)
            due = t + rng.randrange(*PLANTED_GAP_MS)
            second = _txn(f"{card}-2", card, rng.choice(by_city[b]), rng.uniform(5, 500), due)
            yield Item(card, json.dumps(first), "ok")
            pending.append((due, Item(card, json.dumps(second), "planted_travel")))
            pending.sort(key=lambda p: p[0])
        else:
            card = rng.choices(ids, cum_weights=cum_weights)[0]
            merchant = rng.choice(by_city[home[card]])
            prev = last.get(card)
            if prev is not None and not _reachable(table[prev[0]], table[merchant], t - prev[1]):
                merchant = prev[0]
            planted = roll > 1 - amount_rate
            amount = rng.uniform(max_amount + 1, 5 * max_amount) if planted else rng.uniform(1, ORDINARY_MAX)
            last[card] = (merchant, t)
            yield Item(card, json.dumps(_txn(f"{card}-{n}", card, merchant, amount, t)),
                       "planted_amount" if planted else "ok")  # fmt: skip
        n += 1


def lines(options: GenerateOptions) -> Iterator[Line]:
    """The transactions of one `kappa generate --pipeline cards` run (0 to 30 s of event time apart).

    Raises:
        ValueError: an option the generator cannot honour (late, out-of-order or duplicate
            records, a malformed fraction over 0.5, an unknown malformed kind).
    """
    unsupported = [name for name, value in (("late", options.late), ("out_of_order", options.out_of_order),
                                            ("duplicates", options.duplicates)) if value]
    if unsupported:
        raise ValueError(f"the cards generator makes no {', '.join(unsupported)} records; leave them at 0")
    if not 0 <= options.malformed <= MAX_MALFORMED_RATE:
        raise ValueError(f"malformed must be a fraction between 0 and {MAX_MALFORMED_RATE}, "
                         f"got {options.malformed}")
    reasons = tuple(reason for reason, _ in MALFORMED)
    unknown = sorted(set(options.malformed_kinds or reasons) - set(reasons))
    if unknown or options.malformed_kinds == ():
        raise ValueError(f"malformed kinds {unknown or '(none)'} unknown; choose from {', '.join(reasons)}")
    items = generate(sys.maxsize if options.count is None else options.count, options.seed,
                     malformed_rate=options.malformed, start_ms=options.start_ms,
                     malformed_kinds=options.malformed_kinds)
    return (Line(item.value.encode(), item.key.encode() if item.key is not None else None, item.kind)
            for item in items)


def _reachable(a: tuple[Any, ...], b: tuple[Any, ...], gap_ms: int) -> bool:
    """Whether an ordinary card gets from merchant a to b in gap_ms (a flat-earth bound)."""
    dy_km, dx_km = (a[3] - b[3]) * 111.2, (a[4] - b[4]) * 111.2
    return (dy_km * dy_km + dx_km * dx_km) ** 0.5 * 1.5 <= ORDINARY_SPEED_KMH * gap_ms / 3_600_000


def main(argv: list[str] | None = None) -> int:
    """Print generated transactions as JSON lines (with --labels: {key, value, kind} objects)."""
    parser = argparse.ArgumentParser(prog="python -m pipelines.cards.generator", description=__doc__)
    parser.add_argument("--count", type=int, default=1000, help="messages to print")
    parser.add_argument("--seed", type=int, default=0, help="random seed (same seed, same output)")
    parser.add_argument("--cards", type=int, default=200, help="ordinary cards")
    parser.add_argument("--malformed-rate", type=float, default=0.0, help="share of bad messages")
    parser.add_argument("--labels", action="store_true", help="print {key, value, kind} per line")
    args = parser.parse_args(argv)
    if args.count < 0 or args.cards < 1 or not 0 <= args.malformed_rate <= MAX_MALFORMED_RATE:
        print("error: need --count >= 0, --cards >= 1 and 0 <= --malformed-rate <= 0.5", file=sys.stderr)
        return 2
    try:
        for item in generate(args.count, args.seed, cards=args.cards, malformed_rate=args.malformed_rate):
            labelled = {"key": item.key, "value": item.value, "kind": item.kind}
            sys.stdout.write((json.dumps(labelled) if args.labels else item.value) + "\n")
    except BrokenPipeError:  # the reader stopped early (e.g. `| head`)
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
