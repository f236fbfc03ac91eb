"""What the workers' backend offers beyond running turns, its skills and toolsets
(upstream-api.md §2), from the backend that lists them to the API that serves them.

API replicas never build a backend (they may not even have its package installed), so the path
is: a worker asks its backend for a :class:`BackendCatalog` (a backend offers one by having an
``async catalog()`` method, :class:`CatalogSource`; ``echo`` and ``openai`` have none and publish
nothing), :func:`publish_forever` writes it to Redis at startup and every minute, and any API
replica reads it (:class:`CachedCatalog`) for ``GET /v1/skills``, ``GET /v1/toolsets`` and the
``skills_api`` capability.

One string key (``Keys.catalog``) holds the JSON of the last published catalog, with a TTL that
every publish renews. The workers of one namespace run one configured backend, so they all
publish the same catalog and the last writer's copy is as good as any; when no publishing worker
is left the key lapses and the API answers empty lists again instead of advertising what nobody
can run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from hermes_queue.aio import cancel_requested
from hermes_queue.keys import Keys
from hermes_queue.redisio.health import OutageLog

log = logging.getLogger(__name__)

# Workers refresh every minute: skills and toolsets change only when an operator installs or
# reconfigures something, so a minute's delay is fine and the cost (one SET per worker per
# minute) is nothing. The TTL is three refreshes: a worker may miss two (a Redis blip, a slow
# catalog() call) without the lists flickering empty, and a catalog outlives its last worker
# by at most three minutes.
REFRESH_SECONDS = 60.0
TTL_SECONDS = 180
# API processes keep the last read this long: clients poll these lists and capabilities, and a
# catalog changes at most once a minute.
MAX_AGE_SECONDS = 1.0


@dataclass(frozen=True)
class BackendCatalog:
    """Items already in upstream's shapes, served as they are: a skill is
    ``{name, description, category, ...}``, a toolset is
    ``{name, label, description, enabled, configured, tools: [...]}``."""

    skills: list[dict[str, Any]]
    toolsets: list[dict[str, Any]]

    def to_bytes(self) -> bytes:
        """JSON: the items are JSON-shaped already, and ``redis-cli GET`` stays readable."""
        return json.dumps(
            {"skills": self.skills, "toolsets": self.toolsets},
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_bytes(cls, raw: bytes | str) -> BackendCatalog:
        """The inverse of :meth:`to_bytes`; ``ValueError`` when ``raw`` is not a catalog."""
        data = json.loads(raw)  # JSONDecodeError is a ValueError
        if not isinstance(data, dict):
            raise ValueError("a backend catalog must be a JSON object")
        return cls(skills=_items(data, "skills"), toolsets=_items(data, "toolsets"))


def _items(data: dict[str, Any], name: str) -> list[dict[str, Any]]:
    items = data.get(name, [])
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ValueError(f"backend catalog {name!r} must be a list of objects")
    return items


@runtime_checkable
class CatalogSource(Protocol):
    """A backend that can say what it offers. Called by the worker at startup and then
    periodically, never during a turn; it may read disk or configuration, but must not raise
    for a merely empty catalog (return empty lists)."""

    async def catalog(self) -> BackendCatalog: ...


# -- in Redis ----------------------------------------------------------------------------------


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


# -- the worker's side task --------------------------------------------------------------------


async def publish_forever(
    redis: aioredis.Redis,
    keys: Keys,
    backend: object,
    interval: float = REFRESH_SECONDS,
    ttl: int = TTL_SECONDS,
) -> None:
    """Publish ``backend``'s catalog now and every ``interval``; returns at once for a backend
    without one. A failing ``catalog()`` or Redis is logged and retried on the next beat: the
    catalog is a convenience for clients and must never stop a worker from running turns."""
    if not isinstance(backend, CatalogSource):
        return
    name = getattr(backend, "name", type(backend).__name__)
    outage = OutageLog(log, "catalog")
    while not cancel_requested():
        try:
            # Bounded: a hung catalog() must not leave the key to lapse unnoticed.
            async with asyncio.timeout(interval):
                catalog = await backend.catalog()
            await publish_catalog(redis, keys, catalog, ttl)
            outage.ok()
        except RedisError as exc:
            outage.failed(exc)
        except TimeoutError:
            log.warning("catalog: backend %s took over %.0fs to list it", name, interval)
        except Exception:
            log.exception("catalog: backend %s could not list its catalog", name)
        await asyncio.sleep(interval)


# -- the API's side ----------------------------------------------------------------------------


class CachedCatalog:
    """The published catalog as this process last read it, reused for ``max_age`` seconds.
    Only successful reads are kept, so a Redis error is never remembered."""

    def __init__(self, redis: aioredis.Redis, keys: Keys, max_age: float = MAX_AGE_SECONDS) -> None:
        self._redis = redis
        self._keys = keys
        self._max_age = max_age
        self._value: BackendCatalog | None = None
        self._read_at = -math.inf

    async def get(self) -> BackendCatalog | None:
        now = time.monotonic()
        if now - self._read_at < self._max_age:
            return self._value
        self._value = await read_catalog(self._redis, self._keys)
        self._read_at = now
        return self._value
