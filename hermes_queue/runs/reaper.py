"""Settles runs whose lease lapsed (their worker died or froze), and stops session turns
nobody reads any more that another turn waits behind (``streams/presence.py``).

Every worker and every API process runs one: the scripts are atomic, so any number of reapers
may race on one run and exactly one acts. Running it in the API too means a run is settled even
when its only worker is gone. A run taken from the queue has its lease in the same script
(``claim.lua``), so there is no picked-up-but-unclaimed state for a reaper to look for.
"""

from __future__ import annotations

import asyncio
import logging

from redis.exceptions import RedisError

from hermes_queue.aio import cancel_requested
from hermes_queue.redisio.health import OutageLog
from hermes_queue.runs.repository import RunRepository

log = logging.getLogger(__name__)


async def reap_forever(repository: RunRepository, interval: float) -> None:
    leases = repository.leases
    outage = OutageLog(log, "reaper")  # one line when Redis goes away, one when it is back
    while not cancel_requested():
        try:
            for run_id, verdict in (await leases.reap_expired()).items():
                if verdict in ("failed", "cancelled", "requeued"):
                    log.warning("run %s lost its worker: %s", run_id, verdict)
            for run_id in await repository.supersede_abandoned():
                log.info("run %s: nobody reads it and a turn waits behind it: stopped", run_id)
            outage.ok()
        except RedisError as exc:
            outage.failed(exc)
        except Exception:
            log.exception("reaper pass failed")
        await asyncio.sleep(interval)
