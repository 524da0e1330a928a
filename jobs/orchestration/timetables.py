"""The ``replay`` DAG's timetable: hourly data intervals that only a backfill or a trigger runs.

Airflow's backfill (UI, ``airflow backfill create``, REST) needs a periodic timetable, and with
an ordinary one the scheduler also makes a run of its own every hour the DAG is unpaused. Such
a run holds its logical date: a later backfill with Airflow's default reprocess behaviour
("none") finds the hour taken and creates no run for it (a backfill of hours the DAG was
unpaused through creates none at all and reports completed). With :class:`BackfillIntervals`
the scheduler makes no run: only a backfill (every hour of its range) or a trigger runs the DAG.

Airflow serialises a timetable by its import path, so the class is registered by the plugin in
``jobs/orchestration/airflow_plugins/`` (``[core] plugins_folder``, set by ``kappa airflow up``).
Importing this module imports Airflow's core (a DAG file's parse already does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.timetables.interval import CronDataIntervalTimetable

if TYPE_CHECKING:
    from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction
    from pendulum.tz.timezone import FixedTimezone, Timezone


class BackfillIntervals(CronDataIntervalTimetable):
    """Cron data intervals (``@hourly``: [10:00, 11:00) ...) inside a bounded range only.

    The scheduler asks for the next run with the DAG's own restriction, which has no end (the
    DAG has no ``end_date``): no run. A backfill asks for the runs between its from and to
    dates: every interval of the cron in that range, as ``CronDataIntervalTimetable`` gives.
    A manual trigger gets the interval that ends at its logical date, as there.
    """

    can_be_scheduled = False

    def __init__(self, cron: str, timezone: str | Timezone | FixedTimezone) -> None:
        super().__init__(cron, timezone)
        self.description = f"{self.description}; runs only by backfill or trigger"

    def next_dagrun_info(self, *, last_automated_data_interval: DataInterval | None,
                         restriction: TimeRestriction) -> DagRunInfo | None:
        """None for the scheduler (no end to the range); the cron's next interval in a backfill's range."""
        if restriction.latest is None:
            return None
        return super().next_dagrun_info(last_automated_data_interval=last_automated_data_interval,
                                        restriction=restriction)
