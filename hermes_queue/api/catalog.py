"""``GET /v1/skills`` and ``GET /v1/toolsets`` (HERMES_API §2): what the workers' backend offers.

The API never builds a backend, so it serves what the workers published in Redis
(``runs/catalog.py``): upstream's list shapes, with empty ``data`` when nothing is published
(the ``echo`` and ``openai`` backends have no catalog, or no worker is alive). A Redis failure is
the usual error envelope (503 ``redis_unavailable`` from the error middleware), never an empty
list that would read as "nothing installed". Auth is the middleware's, as on every route.

Each process keeps the last read for a second: clients poll these lists and capabilities, and
a catalog changes at most once a minute.
"""

from __future__ import annotations

import math
import time

import redis.asyncio as aioredis
from aiohttp import web

from hermes_queue.agents.catalog import BackendCatalog
from hermes_queue.api.appkeys import REDIS, SETTINGS
from hermes_queue.keys import Keys
from hermes_queue.runs.catalog import read_catalog

MAX_AGE_SECONDS = 1.0


class CatalogCache:
    """The published catalog as this process last read it, reused for ``max_age`` seconds.
    Only successful reads are kept, so a Redis error is never remembered."""

    def __init__(self, max_age: float = MAX_AGE_SECONDS) -> None:
        self._max_age = max_age
        self._value: BackendCatalog | None = None
        self._read_at = -math.inf

    async def get(self, redis: aioredis.Redis, keys: Keys) -> BackendCatalog | None:
        now = time.monotonic()
        if now - self._read_at < self._max_age:
            return self._value
        self._value = await read_catalog(redis, keys)
        self._read_at = now
        return self._value


CATALOG = web.AppKey("catalog", CatalogCache)


async def published(app: web.Application) -> BackendCatalog | None:
    """The catalog the workers published (through this process's cache), or None."""
    return await app[CATALOG].get(app[REDIS], Keys(app[SETTINGS].namespace))


async def skills(request: web.Request) -> web.Response:
    catalog = await published(request.app)
    return web.json_response({"object": "list", "data": catalog.skills if catalog else []})


async def toolsets(request: web.Request) -> web.Response:
    catalog = await published(request.app)
    data = catalog.toolsets if catalog else []
    return web.json_response({"object": "list", "platform": "api_server", "data": data})


def add_routes(app: web.Application) -> None:
    app[CATALOG] = CatalogCache()
    app.router.add_get("/v1/skills", skills)
    app.router.add_get("/v1/toolsets", toolsets)
