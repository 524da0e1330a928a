"""What the collector checks of an RSVP before it logs it (``collect:`` in pipeline.yaml).

Structure only: a JSON object carrying every required top-level key, with ``rsvp_id`` and
``mtime`` 64-bit integers; the Kafka key is the ``rsvp_id``. The streaming job checks the rest.
"""

from __future__ import annotations

from pipelines.rsvp.schema import check_record

check = check_record
