"""The scheduler every worker runs beside its jobs: fire due ticks, settle finished fires.

There is no leader: every worker's scheduler asks the store for the due jobs each
``scheduler_interval_seconds`` and tries to fire each one; ``firing.py`` makes sure a tick
yields one run however many try. So ticks keep firing as long as any one worker is up, and a
worker that dies mid-fire leaves nothing half done that the next pass does not finish.

A tick missed while no worker was up fires **once** when one comes back (upstream does the
same: a backlog is never burst-fired), and the schedule moves on to its next tick in the
future; the skipped ticks are counted in ``hermes_queue_job_missed_ticks_total``. A one-shot
whose time passed during the outage fires then.

The clock is injectable (``clock``), and one pass is a plain call (``run_pass``), so tests
step through ticks without sleeping.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from hermes_queue.aio import cancel_requested
from hermes_queue.config import ScheduleSettings
from hermes_queue.redisio.health import OutageLog
from hermes_queue.routing import RoutingConfig
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.start import RunStarter
from hermes_queue.schedules.firing import FireObserver, Firing, job_timezone
from hermes_queue.store.protocol import SessionStore

log = logging.getLogger(__name__)

# Due jobs handled per pass; more wait for the next pass (the most overdue first).
BATCH = 100


class Scheduler:
    def __init__(self, firing: Firing, clock: Callable[[], float] = time.time) -> None:
        self.firing = firing
        self.clock = clock

    async def run_pass(self) -> int:
        """Fire what is due now and settle the fires whose runs ended; returns how many fires
        this pass recorded."""
        now = self.clock()
        recorded = 0
        for job in await self.firing.store.due_jobs(now, BATCH):
            try:
                recorded += await self.firing.fire_tick(job, now)
            except Exception:  # one broken job must not hold up the others
                log.exception("job %s: could not fire its tick", job.id)
        await self.firing.settle_open()
        return recorded


async def schedule_forever(scheduler: Scheduler, interval: float) -> None:
    """Passes until cancelled; a failing pass (Redis or the database away) is retried."""
    outage = OutageLog(log, "scheduler", where="Redis or the session store")  # once an outage
    while not cancel_requested():
        try:
            await scheduler.run_pass()
            outage.ok()
        except Exception as exc:
            outage.failed(exc)
        await asyncio.sleep(interval)


def start_scheduler(
    settings: ScheduleSettings,
    store: SessionStore | None,
    repository: RunRepository,
    routing: RoutingConfig,
    observer: FireObserver | None,
) -> list[asyncio.Task[None]]:
    """The worker's scheduler task (none when ``scheduler_interval_seconds`` is 0)."""
    if store is None or settings.interval_seconds <= 0:
        return []
    firing = Firing(store, RunStarter(repository), routing, job_timezone(settings), observer)
    task = schedule_forever(Scheduler(firing), settings.interval_seconds)
    return [asyncio.create_task(task, name="scheduler")]
