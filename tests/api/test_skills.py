"""``/v1/skills``, ``/v1/toolsets`` and ``skills_api`` follow the catalog the workers published."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient

from hermes_queue.catalog import MAX_AGE_SECONDS, publish_catalog
from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from tests.support.inprocess import running_api
from tests.test_catalog import CATALOG


async def _lists(api: TestClient) -> tuple[Any, Any]:
    skills = await api.get("/v1/skills")
    toolsets = await api.get("/v1/toolsets")
    assert skills.status == toolsets.status == 200
    return await skills.json(), await toolsets.json()


async def _skills_api(api: TestClient) -> bool:
    body = await (await api.get("/v1/capabilities")).json()
    return bool(body["features"]["skills_api"])


async def test_empty_lists_without_a_catalog(api: TestClient) -> None:
    skills, toolsets = await _lists(api)
    assert skills == {"object": "list", "data": []}
    assert toolsets == {"object": "list", "platform": "api_server", "data": []}
    assert await _skills_api(api) is False
    del api.session.headers["Authorization"]
    assert (await api.get("/v1/skills")).status == 401
    assert (await api.get("/v1/toolsets")).status == 401


async def test_the_published_catalog_is_served(api: TestClient, redis: Any, keys: Keys) -> None:
    await publish_catalog(redis, keys, CATALOG)
    skills, toolsets = await _lists(api)
    assert skills == {"object": "list", "data": CATALOG.skills}
    assert toolsets == {"object": "list", "platform": "api_server", "data": CATALOG.toolsets}
    assert await _skills_api(api) is True
    body = await (await api.get("/v1/capabilities")).json()
    assert body["endpoints"]["skills"] == {"method": "GET", "path": "/v1/skills"}


async def test_a_lapsed_catalog_empties_the_lists(api: TestClient, redis: Any, keys: Keys) -> None:
    await publish_catalog(redis, keys, CATALOG)
    assert await _skills_api(api) is True
    await redis.delete(keys.catalog)  # what the TTL does when no worker refreshes it
    await asyncio.sleep(MAX_AGE_SECONDS + 0.1)
    skills, toolsets = await _lists(api)
    assert skills["data"] == [] and toolsets["data"] == []
    assert await _skills_api(api) is False


async def test_a_redis_outage_is_the_error_envelope(settings: Settings) -> None:
    dead = settings.replace(redis_url="redis://127.0.0.1:1/0")  # nothing listens on port 1
    async with running_api(dead) as api:
        for path in ("/v1/skills", "/v1/toolsets"):
            response = await api.get(path)
            assert response.status == 503
            assert (await response.json())["error"]["code"] == "redis_unavailable"
        # Capabilities still answer; without a readable catalog skills_api is false.
        assert await _skills_api(api) is False


async def test_a_malformed_catalog_is_a_500_envelope(
    api: TestClient, redis: Any, keys: Keys
) -> None:
    await redis.set(keys.catalog, b"not json", ex=60)
    response = await api.get("/v1/skills")
    assert response.status == 500
    assert response.content_type == "application/json"
    assert (await response.json())["error"]["code"] == "internal_error"
