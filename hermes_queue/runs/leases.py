"""The leases of running runs (``repository.leases``): what the lease keeper renews and the
reapers settle.

A claim gives the run a lease in the ``leases`` sorted set (deadline by the Redis clock); its
worker's heartbeat renews it. One that lapsed is settled by any reaper: requeued, failed
``worker_lost`` or cancelled. (Taking a run from the queue and claiming it are one script, so
no run can be picked up and then lost before its lease exists.)
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.config import RunSettings
from hermes_queue.keys import Keys
from hermes_queue.runs.model import FailReason, RunStatus
from hermes_queue.runs.scripts import Outcomes, current_stats_key, decode, load_script
from hermes_queue.streams.codec import encode_data

log = logging.getLogger(__name__)

WORKER_LOST_ERROR = "worker lost: the worker running this turn stopped renewing its lease"


class Leases:
    def __init__(
        self,
        redis: aioredis.Redis,
        settings: RunSettings,
        keys: Keys,
        on_finished: Outcomes,
    ) -> None:
        self.settings = settings
        self.keys = keys
        # Told of each run a reap ends (failed or cancelled): the repository's metrics hook.
        self._on_finished = on_finished
        self._scripts: dict[str, AsyncScript] = {
            name: redis.register_script(load_script(name, sharded=keys.cluster))
            for name in ("expired", "reap")
        }

    def renew_args(self, run_id: str, attempt: int) -> tuple[list[str], list[Any]]:
        """Keys and args of one lease renewal (the lease keeper pipelines many)."""
        return (
            [self.keys.run(run_id), self.keys.leases_of(run_id), self.keys.events(run_id)],
            [
                run_id,
                attempt,
                int(self.settings.lease_seconds * 1000),
                self.settings.retention_seconds,
            ],
        )

    @property
    def renew_script(self) -> str:
        return load_script("renew", sharded=self.keys.cluster)

    async def expired(self, limit: int = 100) -> list[str]:
        """Runs whose lease deadline passed, oldest first in each shard (every shard's)."""
        found: list[str] = []
        for shard in self.keys.shard_ids:
            try:
                ids = await self._scripts["expired"](
                    keys=[self.keys.leases_at(shard)], args=[limit]
                )
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                if not self.keys.cluster:
                    raise
                # A primary failing over: the other shards' runs are still reaped.
                log.warning("shard %d: lapsed leases not read (%s)", shard, exc)
                continue
            found += [decode(run_id) for run_id in ids]
        return found

    async def reap(self, run_id: str) -> str:
        """Settle one run whose lease expired: requeue, fail (worker_lost) or cancel it."""
        result = await self._scripts["reap"](
            keys=[
                self.keys.run(run_id),
                self.keys.events(run_id),
                self.keys.leases_of(run_id),
                self.keys.queue_of(run_id),
                current_stats_key(self.keys, run_id),
                self.keys.failures_of(run_id),
            ],
            args=[
                run_id,
                self.settings.max_attempts,
                repr(time.time()),
                self.settings.retention_seconds,
                self.settings.stream_maxlen,
                self.keys.wake_channel_of(run_id),
                encode_data({"error": WORKER_LOST_ERROR, "reason": FailReason.WORKER_LOST}),
                encode_data({"reason": FailReason.WORKER_LOST}),
                WORKER_LOST_ERROR,
                FailReason.WORKER_LOST,
            ],
        )
        verdict = decode(result)
        if verdict in (RunStatus.FAILED, RunStatus.CANCELLED):
            self._on_finished(verdict)
        return verdict

    async def reap_expired(self) -> dict[str, str]:
        return {run_id: await self.reap(run_id) for run_id in await self.expired()}
