"""Settles runs whose lease lapsed (their worker died or froze), and frees jobs whose worker
died after the queue handed them over but before it claimed the run.

Every worker and every API process runs one: the scripts are atomic, so any number of reapers
may race on one run and exactly one acts. Running it in the API too means a run is settled even
when its only worker is gone. Orphaned pickups are looked for once per lease period: a pickup
is claimed within milliseconds, so only one older than a lease can be dead.
"""

from __future__ import annotations

import asyncio
import logging

from redis.exceptions import RedisError

from hermes_queue.aio import cancel_requested
from hermes_queue.runs.repository import RunRepository

log = logging.getLogger(__name__)


async def reap_forever(repository: RunRepository, interval: float) -> None:
    leases = repository.leases
    loop = asyncio.get_running_loop()
    next_orphan_check = loop.time()
    while not cancel_requested():
        try:
            for run_id, verdict in (await leases.reap_expired()).items():
                if verdict in ("failed", "cancelled", "requeued"):
                    log.warning("run %s lost its worker: %s", run_id, verdict)
            if loop.time() >= next_orphan_check:
                next_orphan_check = loop.time() + leases.settings.lease_seconds
                for run_id in await leases.release_orphaned_pickups():
                    log.warning("run %s: its worker died before claiming it; released", run_id)
        except RedisError as exc:
            log.warning("reaper: Redis unavailable (%s)", exc)
        except Exception:
            log.exception("reaper pass failed")
        await asyncio.sleep(interval)
