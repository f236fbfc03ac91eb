"""The backend catalog in Redis: workers publish it, any API replica reads it.

One string key (``Keys.catalog``) holds the JSON of the last published
:class:`~hermes_queue.agents.catalog.BackendCatalog`, with a TTL that every publish renews. The
workers of one namespace run one configured backend, so they all publish the same catalog and
the last writer's copy is as good as any; when no publishing worker is left the key lapses and
the API answers empty lists again instead of advertising what nobody can run.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from hermes_queue.agents.catalog import BackendCatalog
from hermes_queue.keys import Keys

# Workers refresh every minute: skills and toolsets change only when an operator installs or
# reconfigures something, so a minute's delay is fine and the cost (one SET per worker per
# minute) is nothing. The TTL is three refreshes: a worker may miss two (a Redis blip, a slow
# catalog() call) without the lists flickering empty, and a catalog outlives its last worker
# by at most three minutes.
REFRESH_SECONDS = 60.0
TTL_SECONDS = 180


async def publish_catalog(
    redis: aioredis.Redis, keys: Keys, catalog: BackendCatalog, ttl: int = TTL_SECONDS
) -> None:
    """Write ``catalog`` (replacing any earlier one) to live ``ttl`` seconds."""
    await redis.set(keys.catalog, catalog.to_bytes(), ex=ttl)


async def read_catalog(redis: aioredis.Redis, keys: Keys) -> BackendCatalog | None:
    """The published catalog, or None when no live worker published one. Redis errors
    propagate; a payload that is not a catalog raises ``ValueError``."""
    raw = await redis.get(keys.catalog)
    return None if raw is None else BackendCatalog.from_bytes(raw)
