"""A worker side task: publish what the backend offers, at startup and then periodically.

Only backends with a ``catalog()`` method (:class:`CatalogSource`) publish; for the others the
task ends at once. A failing ``catalog()`` or Redis is logged and retried on the next beat: the
catalog is a convenience for clients and must never stop a worker from running turns.
"""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from hermes_queue.agents.base import AgentBackend
from hermes_queue.agents.catalog import CatalogSource
from hermes_queue.aio import cancel_requested
from hermes_queue.keys import Keys
from hermes_queue.runs.catalog import REFRESH_SECONDS, TTL_SECONDS, publish_catalog

log = logging.getLogger(__name__)


async def publish_forever(
    redis: aioredis.Redis,
    keys: Keys,
    backend: AgentBackend,
    interval: float = REFRESH_SECONDS,
    ttl: int = TTL_SECONDS,
) -> None:
    if not isinstance(backend, CatalogSource):
        return
    while not cancel_requested():
        try:
            # Bounded: a hung catalog() must not leave the key to lapse unnoticed.
            async with asyncio.timeout(interval):
                catalog = await backend.catalog()
            await publish_catalog(redis, keys, catalog, ttl)
        except RedisError as exc:
            log.warning("catalog: Redis unavailable (%s)", exc)
        except TimeoutError:
            log.warning("catalog: backend %s took over %.0fs to list it", backend.name, interval)
        except Exception:
            log.exception("catalog: backend %s could not list its catalog", backend.name)
        await asyncio.sleep(interval)
