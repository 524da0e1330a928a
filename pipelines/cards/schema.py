"""The card pipeline's record schemas and dead-letter reasons, as named constants."""

from __future__ import annotations

import pyarrow as pa

# Dead-letter reasons parse() may give, in the order they are checked.
REASONS: tuple[str, ...] = (
    "invalid_json",
    "not_an_object",
    "missing_field",
    "wrong_type",
    "invalid_value",
    "bad_event_time",
)

DECISIONS: tuple[str, ...] = ("approve", "flag")
DECISION_REASONS: tuple[str, ...] = ("ok", "impossible_travel", "amount_over_limit")

# Fields of a raw transaction (JSON object) and their Python types.
TRANSACTION_FIELDS: dict[str, tuple[type, ...]] = {
    "txn_id": (str,),
    "card_id": (str,),
    "merchant_id": (str,),
    "country": (str,),
    "lat": (int, float),
    "lon": (int, float),
    "amount": (int, float),
    "currency": (str,),
    "event_time_ms": (int,),
}

ANALYZED = pa.schema(
    [
        pa.field("card_id", pa.string(), nullable=False),
        pa.field("txn_id", pa.string(), nullable=False),
        pa.field("merchant_id", pa.string(), nullable=False),
        pa.field("country", pa.string(), nullable=False),
        pa.field("lat", pa.float64(), nullable=False),
        pa.field("lon", pa.float64(), nullable=False),
        pa.field("amount", pa.float64(), nullable=False),
        pa.field("currency", pa.string(), nullable=False),
        pa.field("event_time_ms", pa.int64(), nullable=False),
        pa.field("prev_txn_id", pa.string()),
        pa.field("prev_event_time_ms", pa.int64()),
        pa.field("prev_country", pa.string()),
        pa.field("prev_distance_km", pa.float64()),
        pa.field("prev_speed_kmh", pa.float64()),
        pa.field("decision", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("flagged", pa.bool_(), nullable=False),
    ]
)

# The keyed state of a card: its previous transaction, as kept between records.
STATE_FIELDS: tuple[str, ...] = ("txn_id", "country", "lat", "lon", "event_time_ms")
