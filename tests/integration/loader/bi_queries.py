"""The BI queries of docs/tables.md and their answers, written by hand for the data of
test_silver_gold.py (see the comments there for which row is which)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "tables.md"

EXPECTED = {
    "rsvps_by_city": [("Barcelona", 2, 1, 2), ("Madrid", 2, 1, 1)],
    "daily_responses": [(dt.date(2026, 1, 1), 1, 2), (dt.date(2026, 1, 2), 1, 2)],
    "top_topics": [("Salsa", 4), ("Jazz", 1)],
    "current_city_windows": [("Barcelona", 3)],
    "event_responses": [("ev1", 2, 1, 2)],
    "bronze_per_partition": [(0, 2, 0, 1), (1, 1, 0, 0), (2, 1, 0, 0)],
    "dead_letters_by_reason": [("invalid_json", 2)],
    "load_history": [("bronze.rsvps_raw", "committed", 4), ("gold.rsvp_summaries", "committed", 3),
                     ("ops.dlq", "committed", 2), ("silver.rsvps", "committed", 4),
                     ("silver.rsvps", "committed", 1)],
}


def documented_queries() -> dict[str, str]:
    """``-- query: <name>`` blocks of docs/tables.md."""
    blocks = re.findall(r"```sql\n-- query: (\w+)\n(.*?)```", DOC.read_text(), flags=re.S)
    queries = {name: body.strip() for name, body in blocks}
    assert set(queries) == set(EXPECTED), "docs/tables.md and the expected answers disagree"
    return queries
