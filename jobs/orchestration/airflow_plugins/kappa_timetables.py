"""Airflow plugin: registers the project's timetables (Airflow serialises a DAG's by import path).

Loaded from ``[core] plugins_folder`` (``kappa airflow up`` points it here; on a managed
Airflow, ship this file in its plugins folder with the ``jobs`` package importable).
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from jobs.orchestration.timetables import BackfillIntervals


class KappaTimetables(AirflowPlugin):
    """The timetables of dags/ (``replay``: :class:`BackfillIntervals`)."""

    name = "kappa_timetables"
    timetables: list[Any] = [BackfillIntervals]  # noqa: RUF012 (AirflowPlugin declares it so)
