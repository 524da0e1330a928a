"""A changed transform for the reprocess test: city names starting with S in upper case.

On PYTHONPATH, Python imports this at the start of every process (the CLI, Spark's Python
workers), so the job's tasks run the variant as a fixed transform would run after a deploy.
"""

from pipelines.rsvp import records

_original = records.normalize_city


def _variant(city: str) -> str:
    name = _original(city)
    return name.upper() if name.startswith("S") else name


records.normalize_city = _variant
