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
from collections.abc import Iterable
from typing import Any

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.config import RunSettings
from hermes_queue.keys import Keys
from hermes_queue.runs.model import FailReason, RunStatus
from hermes_queue.runs.scripts import Outcomes, ScriptKeys, decode, load_script
from hermes_queue.runs.shard_leases import unscanned_seconds
from hermes_queue.streams.codec import encode_data

log = logging.getLogger(__name__)

WORKER_LOST_ERROR = "worker lost: the worker running this turn stopped renewing its lease"


def quiet_ms(settings: RunSettings, cluster: bool) -> int:
    """How long a shard's leases may go unheard of before the silence counts as Redis having
    been away (``runs/lua/prelude.lua``: leases_heard). Short enough to catch a silence that
    lapses a live worker's lease before its keeper can renew it after Redis is back (a lease
    less three heartbeats: the one since its last renewal, the one until the next, and one for
    the reconnect), and always longer than a shard goes unheard of in the normal course, plus a
    pass or a heartbeat to spare: a heartbeat (its runs' renewals), a reaper pass, and on a
    cluster a reaper's takeover of the shards of a process that died (``unscanned_seconds``),
    which would otherwise move its own runs' deadlines on and delay their reaping."""
    lease, heartbeat = settings.lease_seconds, settings.heartbeat_seconds
    interval = settings.reaper_interval_seconds
    normal = max(heartbeat, interval)
    if cluster:
        normal = max(normal, unscanned_seconds(interval, heartbeat))
    return int(max(lease - 3 * heartbeat, normal + max(heartbeat, interval)) * 1000)


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
        # What every script about the leases is told (prelude.lua leases_heard): fixed by the
        # settings, so worked out once.
        self.quiet_ms = quiet_ms(settings, keys.cluster)
        self._keys_of = ScriptKeys(keys)
        # Told of each run a reap ends (failed or cancelled): the repository's metrics hook.
        self._on_finished = on_finished
        self._scripts: dict[str, AsyncScript] = {
            name: redis.register_script(load_script(name, sharded=keys.cluster))
            for name in ("expired", "reap")
        }

    def renew_args(self, run_id: str, attempt: int) -> tuple[list[str], list[Any]]:
        """Keys and args of one lease renewal (the lease keeper pipelines many)."""
        return (
            self._keys_of.of_run("renew", run_id),
            [
                run_id,
                attempt,
                int(self.settings.lease_seconds * 1000),
                self.settings.retention_seconds,
                self.quiet_ms,
            ],
        )

    @property
    def renew_script(self) -> str:
        return load_script("renew", sharded=self.keys.cluster)

    async def expired(self, limit: int = 100, shards: Iterable[int] | None = None) -> list[str]:
        """Runs whose lease deadline passed, oldest first in each shard (of ``shards``; None:
        every shard's)."""
        found: list[str] = []
        for shard in self.keys.shard_ids if shards is None else shards:
            try:
                ids = await self._scripts["expired"](
                    keys=self._keys_of.of_shard("expired", shard),
                    args=[limit, self.quiet_ms],
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
            keys=self._keys_of.of_run("reap", run_id),
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
                self.quiet_ms,
            ],
        )
        verdict = decode(result)
        if verdict in (RunStatus.FAILED, RunStatus.CANCELLED):
            self._on_finished(verdict)
        return verdict

    async def reap_expired(self, shards: Iterable[int] | None = None) -> dict[str, str]:
        """Settle the lapsed runs of ``shards`` (None: every shard); their verdicts."""
        return {run_id: await self.reap(run_id) for run_id in await self.expired(shards=shards)}
