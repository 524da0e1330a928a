"""The world the RSVP generator draws from: topics, cities, groups, events, venues, members.

Everything is built from one seed, and popularity is Zipf-distributed (rank ``k`` has weight
``1 / k**s``) so top-N answers downstream (trending topics, busiest cities, hottest events)
are meaningful and stable for a seed.
"""

from __future__ import annotations

import random
import string
from bisect import bisect
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Generic, TypeVar

T = TypeVar("T")

TOPICS = (
    "Software Development", "Hiking", "Photography", "Board Games", "Data Science",
    "Machine Learning", "Python", "Yoga", "Running", "Startups", "Entrepreneurship",
    "Book Club", "Live Music", "Cloud Computing", "JavaScript", "Language Exchange", "Cycling",
    "Wine Tasting", "Meditation", "Women in Tech", "Blockchain", "Public Speaking", "Dance",
    "Film", "Writing", "Painting", "Craft Beer", "Real Estate", "Investing", "Parenting",
    "Dog Lovers", "Rock Climbing", "Kayaking", "Camping", "Soccer", "Tennis", "Chess",
    "Cooking", "Vegan", "Travel", "Spanish", "French", "Japanese Culture", "Anime",
    "Science Fiction", "Astronomy", "Gardening", "Volunteering", "Social Networking",
    "Singles", "New In Town", "Fitness", "Self-Improvement", "Mindfulness", "DevOps",
    "Kubernetes", "Big Data", "Apache Kafka", "Apache Spark", "Product Management", "UX Design",
    "Game Development", "Cybersecurity", "Robotics", "Internet of Things", "Open Source",
    "Golang", "Rust", "Java", "Scala", "Improv", "Theater", "Stand-up Comedy", "Karaoke",
    "Salsa", "Swing Dance", "Sailing", "Scuba Diving", "Skiing", "Snowboarding",
)
CITIES = (  # name, country, state (None outside US/CA), lat, lon
    ("New York", "us", "NY", 40.71, -74.01), ("San Francisco", "us", "CA", 37.77, -122.42),
    ("London", "gb", None, 51.51, -0.13), ("Chicago", "us", "IL", 41.88, -87.63),
    ("Berlin", "de", None, 52.52, 13.40), ("Seattle", "us", "WA", 47.61, -122.33),
    ("Toronto", "ca", "ON", 43.65, -79.38), ("Austin", "us", "TX", 30.27, -97.74),
    ("Paris", "fr", None, 48.86, 2.35), ("Boston", "us", "MA", 42.36, -71.06),
    ("Los Angeles", "us", "CA", 34.05, -118.24), ("Sydney", "au", None, -33.87, 151.21),
    ("Amsterdam", "nl", None, 52.37, 4.90), ("Denver", "us", "CO", 39.74, -104.99),
    ("Tokyo", "jp", None, 35.68, 139.69), ("Madrid", "es", None, 40.42, -3.70),
    ("Atlanta", "us", "GA", 33.75, -84.39), ("Vancouver", "ca", "BC", 49.28, -123.12),
    ("Bangalore", "in", None, 12.97, 77.59), ("Portland", "us", "OR", 45.52, -122.68),
    ("Dublin", "ie", None, 53.35, -6.26), ("Washington", "us", "DC", 38.91, -77.04),
    ("Melbourne", "au", None, -37.81, 144.96), ("Stockholm", "se", None, 59.33, 18.07),
    ("Miami", "us", "FL", 25.76, -80.19), ("Singapore", "sg", None, 1.35, 103.82),
    ("Munich", "de", None, 48.14, 11.58), ("Phoenix", "us", "AZ", 33.45, -112.07),
    ("Montreal", "ca", "QC", 45.50, -73.57), ("Barcelona", "es", None, 41.39, 2.17),
    ("Minneapolis", "us", "MN", 44.98, -93.27), ("Zurich", "ch", None, 47.38, 8.54),
    ("Philadelphia", "us", "PA", 39.95, -75.17), ("Lisbon", "pt", None, 38.72, -9.14),
    ("Nashville", "us", "TN", 36.16, -86.78), ("Warsaw", "pl", None, 52.23, 21.01),
)
FIRST_NAMES = ("Alex", "Maria", "Sam", "Priya", "John", "Chen", "Fatima", "Luca", "Emma", "Noah",
               "Olivia", "Liam", "Ava", "Mateo", "Yuki", "Sofia", "Omar", "Hannah", "Ivan", "Zoe",
               "Kofi", "Aisha", "Pedro", "Mia", "Jonas", "Leila", "Tom", "Nina", "Raj", "Elena")
LAST_NAMES = ("Smith", "Garcia", "Kim", "Patel", "Nguyen", "Müller", "Rossi", "Silva", "Cohen",
              "Brown", "Tanaka", "Khan", "Novak", "Dubois", "Jensen", "Okafor", "Lopez", "Wang",
              "Ivanova", "Murphy", "Haddad", "Schmidt", "Costa", "Larsen", "Ali", "Moreau")
GROUP_SUFFIXES = ("Meetup", "Group", "Club", "Society", "Network", "Enthusiasts", "Collective")
EVENT_WORDS = ("Night", "Workshop", "Social", "Hack Day", "Meetup", "Talks", "Walk",
               "Session", "Mixer", "Bootcamp", "Open Mic", "Brunch", "Lightning Talks")
VENUE_WORDS = ("Hall", "Café", "Library", "Co-working", "Park", "Brewery", "Studio", "Loft")

ZIPF_S = 1.1
EVENT_ZIPF_S = 0.8
MEMBER_ZIPF_S = 0.6
N_GROUPS = 1_500
N_EVENTS = 6_000
N_MEMBERS = 50_000
VENUES_PER_CITY = 25
DAY_MS = 86_400_000


class Zipf(Generic[T]):
    """Draw items with Zipf popularity: the first item is the most popular."""

    def __init__(self, items: list[T], s: float = ZIPF_S) -> None:
        self.items = items
        self._cum = list(accumulate(1.0 / (rank ** s) for rank in range(1, len(items) + 1)))

    def draw(self, rng: random.Random) -> T:
        """One item."""
        return self.items[bisect(self._cum, rng.random() * self._cum[-1])]


@dataclass(frozen=True)
class Catalog:
    """Events (with their group and venue, as ready-made JSON fragments) and members."""

    events: Zipf[dict[str, Any]]
    members: Zipf[dict[str, Any]]


def slug(text: str) -> str:
    """A URL key: lowercase ASCII letters and digits joined by dashes."""
    kept = "".join(c if c.isascii() and c.isalnum() else " " for c in text.lower())
    return "-".join(kept.split())


def build_catalog(seed: int, start_ms: int) -> Catalog:
    """Build the deterministic world for ``seed``; event times lie after ``start_ms``."""
    rng = random.Random(f"catalog-{seed}")
    topics = Zipf(_shuffled(rng, [{"urlkey": slug(t), "topic_name": t} for t in TOPICS]))
    cities = Zipf(_shuffled(rng, list(CITIES)))
    groups = Zipf(_shuffled(rng, [_group(rng, topics, cities) for _ in range(N_GROUPS)]))
    venues = {city[0]: [_venue(rng, city) for _ in range(VENUES_PER_CITY)] for city in CITIES}
    events = [_event(rng, groups.draw(rng), venues, start_ms) for _ in range(N_EVENTS)]
    members = [_member(rng, 10_000_000 + rank * 7) for rank in range(N_MEMBERS)]
    return Catalog(Zipf(_shuffled(rng, events), s=EVENT_ZIPF_S), Zipf(members, s=MEMBER_ZIPF_S))


def _shuffled(rng: random.Random, items: list[T]) -> list[T]:
    rng.shuffle(items)
    return items


def _group(rng: random.Random, topics: Zipf[dict[str, str]], cities: Zipf[tuple]) -> dict[str, Any]:
    name, country, state, lat, lon = cities.draw(rng)
    wanted = min(15, max(1, round(rng.gauss(5, 3))))
    chosen: list[dict[str, str]] = []
    while len(chosen) < wanted:
        topic = topics.draw(rng)
        if topic not in chosen:
            chosen.append(topic)
    title = f"{name} {chosen[0]['topic_name']} {rng.choice(GROUP_SUFFIXES)}"
    group_id = rng.randrange(1_000_000, 40_000_000)
    group = {
        "group_topics": chosen, "group_city": name, "group_country": country,
        "group_id": group_id, "group_name": title, "group_urlname": f"{slug(title)}-{group_id % 1000}",
        "group_lat": round(lat + rng.uniform(-0.08, 0.08), 2),
        "group_lon": round(lon + rng.uniform(-0.08, 0.08), 2),
    }
    if state is not None:
        group["group_state"] = state
    return group


def _venue(rng: random.Random, city: tuple) -> dict[str, Any]:
    _, _, _, lat, lon = city
    return {"venue_name": f"{rng.choice(LAST_NAMES)} {rng.choice(VENUE_WORDS)}",
            "lon": round(lon + rng.uniform(-0.1, 0.1), 6), "lat": round(lat + rng.uniform(-0.1, 0.1), 6),
            "venue_id": rng.randrange(10_000_000, 30_000_000)}


def _event(rng: random.Random, group: dict[str, Any], venues: dict[str, list[dict[str, Any]]],
           start_ms: int) -> dict[str, Any]:
    event_id = "".join(rng.choices(string.ascii_lowercase, k=12))
    topic = group["group_topics"][0]["topic_name"]
    return {
        "event": {"event_name": f"{topic} {rng.choice(EVENT_WORDS)}", "event_id": event_id,
                  "time": start_ms + rng.randrange(1, 60) * DAY_MS // 4,
                  "event_url": f"https://www.meetup.com/{group['group_urlname']}/events/{event_id}/"},
        "group": group,
        "venue": rng.choice(venues[group["group_city"]]),
    }


def _member(rng: random.Random, member_id: int) -> dict[str, Any]:
    member: dict[str, Any] = {
        "member_id": member_id,
        "member_name": f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"}
    if rng.random() < 0.7:
        member["photo"] = (f"https://secure.meetupstatic.com/photos/member/{member_id % 997}/"
                           f"thumb_{member_id}.jpeg")
    return member
