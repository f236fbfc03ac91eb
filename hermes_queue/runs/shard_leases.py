"""Which shards this process reaps: on a Redis Cluster, one process per shard at a time.

Every worker and API process runs a reaper (``reaper.py``). Without a cluster there is one
shard and every reaper scans it, as always (the scans are cheap and the scripts atomic). On a
cluster, scanning every shard from every process costs ``2 × shards`` script calls per
process per pass, so the fleet's idle cost would grow with processes × shards. Instead each
shard has a short lease (``keys.reaper_lease_at``, in the shard's own slot, value: the holder's
id, TTL :data:`LEASE_PASSES` reaper passes) and only its holder scans it.

* A holder renews its leases every third of a lease (``shard_lease.lua``).
* A process holding fewer than its share (``ceil(shards / live workers)``; live: a heartbeat
  in ``keys.workers`` within :data:`LIVE_HEARTBEATS` heartbeats) tries the shards it does not
  hold; a lease held by another tells it the milliseconds left, and it tries that shard again
  when they run out. So after a holder dies (SIGKILL) its shards are taken over when its
  leases lapse: within one lease of its last renewal (or of its last heartbeat's ageing out,
  if later), plus a pass.
* A process holding more than its share (it started first, or workers joined since) releases
  the surplus, which the others then take.

A process at its share tries nothing, so in a settled fleet an idle process spends nothing on
shards it does not reap. Two processes may both believe they hold a shard for at most the
moment a lapsed lease changes hands: harmless, the reap scripts are atomic.
"""

from __future__ import annotations

import logging
import math
import time

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.keys import Keys
from hermes_queue.runs.scripts import ScriptKeys, load_script

log = logging.getLogger(__name__)

# A lease lasts this many reaper passes; its holder renews it every third of that.
LEASE_PASSES = 5
# What _call answers for a shard whose primary could not be reached.
UNREACHED = -2
# A worker whose last heartbeat is older than this many heartbeats is not counted live.
LIVE_HEARTBEATS = 3


def unscanned_seconds(interval: float, heartbeat: float) -> float:
    """The longest a shard goes without a reaper pass when its holder dies: the pass before
    the death, then the later of its lease lapsing and its heartbeat ageing out of the live
    count (a share recomputed every third of a lease), then the taker's first pass."""
    lease = max(LEASE_PASSES * interval, 1.0)
    return interval + max(lease, LIVE_HEARTBEATS * heartbeat + lease / 3) + interval


class ReaperShards:
    """``await due()`` before each reaper pass: the shards this process scans in it."""

    def __init__(
        self, redis: aioredis.Redis, keys: Keys, owner: str, interval: float, heartbeat: float
    ) -> None:
        self.keys = keys
        self._live_seconds = LIVE_HEARTBEATS * heartbeat
        self.owner = owner
        self._redis = redis
        self._keys_of = ScriptKeys(keys)
        self.lease_seconds = max(LEASE_PASSES * interval, 1.0)
        self._script: AsyncScript = redis.register_script(load_script("shard_lease"))
        self.held: set[int] = set()
        self._renew_at = 0.0
        self._retry_at: dict[int, float] = {}  # shard held by another -> when to try again
        self._share = len(keys.shard_ids)
        self._share_at = 0.0

    async def due(self) -> list[int]:
        """The shards to scan now: every one without a cluster; on a cluster the ones whose
        lease this process holds (renewed, taken or released here as above)."""
        if not self.keys.cluster:
            return list(self.keys.shard_ids)
        now = time.monotonic()
        if now >= self._share_at:
            self._share_at = now + self.lease_seconds / 3
            self._share = await self._fair_share()
        if now >= self._renew_at:
            self._renew_at = now + self.lease_seconds / 3
            for shard in sorted(self.held):
                if await self._call(shard, self.lease_seconds) not in (-1, UNREACHED):
                    self.held.discard(shard)  # lapsed (a long pause): another holds it now
        for shard in sorted(self.held)[self._share :]:
            await self._call(shard, 0)  # the surplus: another process takes it
            self.held.discard(shard)
            self._retry_at[shard] = now + self.lease_seconds
        for shard in self.keys.shard_ids:
            if len(self.held) >= self._share:
                break
            if shard in self.held or self._retry_at.get(shard, 0.0) > now:
                continue
            left = await self._call(shard, self.lease_seconds)
            if left == UNREACHED:
                self._retry_at[shard] = now + self.lease_seconds / 3
            elif left == -1:
                self.held.add(shard)
                self._retry_at.pop(shard, None)
            else:
                self._retry_at[shard] = now + max(left, 0) / 1000
        return sorted(self.held)

    async def release(self) -> None:
        """Hand every held lease back (a clean stop: the others take them at once)."""
        for shard in sorted(self.held):
            await self._call(shard, 0)
        self.held.clear()

    async def _call(self, shard: int, seconds: float) -> int:
        """The lease script on ``shard``; a shard whose primary cannot be reached (failing
        over) answers as if held by another, for a pass: the other shards go on."""
        keys = self._keys_of.of_shard("shard_lease", shard)
        try:
            return int(await self._script(keys=keys, args=[self.owner, int(seconds * 1000)]))
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            log.debug("shard %d: reaper lease not reached (%s)", shard, exc)
            return UNREACHED

    async def _fair_share(self) -> int:
        """``ceil(shards / live workers)``; every shard while no worker is live (API only)."""
        since_ms = int((time.time() - self._live_seconds) * 1000)
        try:
            live = int(await self._redis.zcount(self.keys.workers, since_ms, "+inf"))
        except (RedisConnectionError, RedisTimeoutError, OSError):
            return self._share  # its node failing over: the share as it was
        return math.ceil(len(self.keys.shard_ids) / max(live, 1))


__all__ = ["LEASE_PASSES", "LIVE_HEARTBEATS", "ReaperShards", "unscanned_seconds"]
