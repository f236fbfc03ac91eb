"""Backpressure: new turns are refused with 429 while the ready queue is full, or while the
tenant asking is over one of its own limits.

Every turn is admitted here after its request was validated and before anything is written:
while the ready queue is over its configured depth or age (``queueview.snapshot.admission``),
new work is refused rather than piled onto a backlog that only grows, with a Retry-After from the
measured drain rate. Then the tenant's own limits (``tenancy/limits.py``): its ready runs
(``tenant_max_ready``: 429 ``queue_full``, Retry-After from the tenant's own drain rate) and its
creation rate (``tenant_max_rate``: 429 ``rate_limited``, Retry-After when its bucket next holds
a run). A tenant without limits costs no command; each refusal is counted per tenant.

The ready limit is a read before the create, not part of it: concurrent requests of one tenant
may pass it together and overshoot it by as many as are in flight at once. The rate bucket is
in Redis, so it holds across every API replica.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Collection
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from hermes_queue.api.errors import ApiError
from hermes_queue.keys import Keys
from hermes_queue.metrics.labels import tenant_label
from hermes_queue.metrics.processes import ApiMetrics
from hermes_queue.queueview.figures import retry_after_seconds
from hermes_queue.queueview.lists import text
from hermes_queue.queueview.snapshot import admission, stats_window
from hermes_queue.queueview.tenants import ask_claims, tenant_claims
from hermes_queue.runs.scripts import load_script
from hermes_queue.tenancy.keys import DEFAULT_TENANT
from hermes_queue.tenancy.limits import NO_LIMITS, TenantLimits, rate_burst

log = logging.getLogger(__name__)

# How long a refusal count is kept (the stats' hour, as the scripts keep their counts).
STATS_TTL_SECONDS = 3900


class Backpressure:
    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        metrics: ApiMetrics,
        *,
        max_depth: int = 0,
        max_age: float = 0.0,
        limits: TenantLimits = NO_LIMITS,
        tenants: Collection[str] = (),
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._metrics = metrics
        # max_ready_depth, max_ready_age_seconds (0: that limit is off).
        self._max_depth = max_depth
        self._max_age = max_age
        self._tenant = TenantAdmission(redis, keys, limits)
        # The configured tenants: the metrics' tenant label names these (and default) only.
        self._tenants = frozenset(tenants)

    async def admit(self, tenant: str = DEFAULT_TENANT) -> None:
        """Raise 429 (with Retry-After) when the ready queue is over its limits (``queue_full``)
        or ``tenant`` over its own (``queue_full``, ``rate_limited``)."""
        refusal = await admission(self._redis, self._keys, self._max_depth, self._max_age)
        if refusal is not None:
            what = (
                "too many runs are waiting for a worker"
                if refusal.reason == "depth"
                else "runs have been waiting too long for a worker"
            )
            await self._refuse(
                tenant,
                refusal.reason,
                refusal.retry_after,
                "queue_full",
                f"The queue is full ({what}); retry after {refusal.retry_after} s",
            )
        mine = await self._tenant.refusal(tenant)
        if mine is None:
            return
        if mine.reason == "ready":
            await self._refuse(
                tenant,
                "tenant_ready",
                mine.retry_after,
                "queue_full",
                f"Too many of your runs are waiting for a worker ({mine.ready}, at most "
                f"{int(mine.limit)}); retry after {mine.retry_after} s",
            )
        await self._refuse(
            tenant,
            "tenant_rate",
            mine.retry_after,
            "rate_limited",
            f"Runs are being created faster than your limit ({mine.limit:g} per second); "
            f"retry after {mine.retry_after} s",
        )

    async def _refuse(
        self, tenant: str, reason: str, retry_after: int, code: str, message: str
    ) -> None:
        self._metrics.rejected(reason, tenant_label(tenant, self._tenants))
        try:
            await self._tenant.count_refusal(tenant)
        except (RedisError, OSError) as exc:  # a count never turns a 429 into a 500
            log.warning("refusal of tenant %s not counted: %r", tenant, exc)
        raise ApiError(429, code, message, headers={"Retry-After": str(retry_after)})


@dataclass(frozen=True)
class TenantRefusal:
    """Why a tenant's new run is refused (``ready``: its ready depth; ``rate``: its creation
    rate), the limit, and when to come back."""

    reason: str
    retry_after: int
    limit: float
    ready: int = 0


class TenantAdmission:
    """The per-tenant limits checked before a run is created; a tenant without limits costs
    nothing (no command)."""

    def __init__(self, redis: aioredis.Redis, keys: Keys, limits: TenantLimits) -> None:
        self._redis = redis
        self._keys = keys
        self._limits = limits
        self._rate = redis.register_script(load_script("rate", sharded=keys.cluster))

    async def refusal(self, tenant: str) -> TenantRefusal | None:
        """None when ``tenant`` may create a run now (taking one from its rate bucket)."""
        max_ready = self._limits.ready(tenant)
        if max_ready:
            refused = await self._over_ready(tenant, max_ready)
            if refused is not None:
                return refused
        per_second = self._limits.rate(tenant)
        if per_second:
            wait_ms = int(
                await self._rate(
                    keys=[self._keys.tenant_rate(tenant)],
                    args=[repr(per_second), rate_burst(per_second)],
                )
            )
            if wait_ms > 0:
                return TenantRefusal("rate", max(1, math.ceil(wait_ms / 1000)), per_second)
        return None

    async def _over_ready(self, tenant: str, max_ready: int) -> TenantRefusal | None:
        """The tenant's ready runs (every shard's ``n:<tenant>``) against its limit, with a
        Retry-After from its own drain rate (its claims over the stats window)."""
        stats_keys, window = stats_window(self._keys, time.time())
        shards = list(self._keys.shard_ids)
        async with self._redis.pipeline(transaction=False) as pipe:
            for shard in shards:
                pipe.hget(self._keys.fair_at(shard), f"n:{tenant}")
            ask_claims(pipe, stats_keys, tenant)
            replies = await pipe.execute()
        ready = sum(int(text(n)) for n in replies[: len(shards)] if n is not None)
        if ready < max_ready:
            return None
        claims = tenant_claims(replies[len(shards) :], tenant)
        drain = claims / window if window > 0 else 0.0
        return TenantRefusal(
            "ready", retry_after_seconds(ready - max_ready + 1, drain), max_ready, ready
        )

    async def count_refusal(self, tenant: str) -> None:
        """One 429 answered to ``tenant``, in this minute's stats (shard 0's), for the
        operator's views."""
        key = self._keys.stats_at(0, int(time.time() // 60))
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hincrby(key, f"refused:{tenant}", 1)
            pipe.expire(key, STATS_TTL_SECONDS)
            await pipe.execute()
