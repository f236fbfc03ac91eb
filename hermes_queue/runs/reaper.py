"""Settles runs whose lease lapsed (their worker died or froze), and stops session turns
nobody reads any more that another turn waits behind (``streams/presence.py``).

Every worker and every API process runs one: the scripts are atomic, so any number of reapers
may race on one run and exactly one acts. Running it in the API too means a run is settled even
when its only worker is gone. A run taken from the queue has its lease in the same script
(``claim.lua``), so there is no picked-up-but-unclaimed state for a reaper to look for. On a
Redis Cluster each shard is scanned by one reaper at a time, the holder of its lease
(``shard_leases.py``), so the fleet's reaping cost does not grow with its processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid

from redis.exceptions import RedisError

from hermes_queue.aio import cancel_requested
from hermes_queue.redisio.health import OutageLog
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.shard_leases import ReaperShards

log = logging.getLogger(__name__)


def reaper_id() -> str:
    """This reaper's lease owner id: host, pid, and a random part (pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


async def reap_forever(
    repository: RunRepository, interval: float, owner: str | None = None
) -> None:
    """Reap every ``interval`` seconds until cancelled; ``owner``: the id this process's shard
    leases carry (a worker's id; a fresh one by default)."""
    leases = repository.leases
    heartbeat = leases.settings.heartbeat_seconds
    owner = owner or reaper_id()
    shards = ReaperShards(repository.redis, repository.keys, owner, interval, heartbeat)
    outage = OutageLog(log, "reaper")  # one line when Redis goes away, one when it is back
    # Held runs are freed by a pass at start whatever the settings (a limit removed since).
    first_pass = True
    try:
        while not cancel_requested():
            try:
                due = await shards.due()
                for run_id, verdict in (await leases.reap_expired(due)).items():
                    if verdict in ("failed", "cancelled", "requeued"):
                        log.warning("run %s lost its worker: %s", run_id, verdict)
                for run_id in await repository.supersede_abandoned(shards=due):
                    log.info("run %s: nobody reads it and a turn waits behind it: stopped", run_id)
                if repository.running_limits or first_pass:
                    await repository.release_held(shards=due)
                    first_pass = False
                outage.ok()
            except RedisError as exc:
                outage.failed(exc)
            except Exception:
                log.exception("reaper pass failed")
            await asyncio.sleep(interval)
    finally:
        if shards.held:  # a clean stop hands the shards on at once
            with contextlib.suppress(Exception):
                await asyncio.shield(shards.release())
