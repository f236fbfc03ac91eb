"""The backend catalog in Redis: publish/read round trip, its TTL, and malformed payloads.

``CATALOG`` is the sample the API and worker catalog tests use too.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hermes_queue.agents.catalog import BackendCatalog
from hermes_queue.keys import Keys
from hermes_queue.runs.catalog import TTL_SECONDS, publish_catalog, read_catalog

CATALOG = BackendCatalog(
    skills=[{"name": "arxiv", "description": "Search papers", "category": "research"}],
    toolsets=[
        {
            "name": "web",
            "label": "Web — recherche",
            "description": "Search and fetch",
            "enabled": True,
            "configured": False,
            "tools": ["web_search", "web_extract"],
        }
    ],
)


async def test_round_trip_and_ttl(redis: Any, keys: Keys) -> None:
    assert await read_catalog(redis, keys) is None
    await publish_catalog(redis, keys, CATALOG)
    assert await read_catalog(redis, keys) == CATALOG
    assert 0 < await redis.ttl(keys.catalog) <= TTL_SECONDS
    # A later publish replaces the catalog and renews its TTL.
    emptied = BackendCatalog(skills=[], toolsets=[])
    await publish_catalog(redis, keys, emptied, ttl=1)
    assert await read_catalog(redis, keys) == emptied
    await asyncio.sleep(1.2)
    assert await read_catalog(redis, keys) is None


def test_bytes_round_trip_keeps_unicode() -> None:
    raw = CATALOG.to_bytes()
    assert "Web — recherche".encode() in raw and BackendCatalog.from_bytes(raw) == CATALOG
    assert BackendCatalog.from_bytes(b"{}") == BackendCatalog(skills=[], toolsets=[])


@pytest.mark.parametrize(
    "raw", [b"not json", b"[]", b'{"skills": {}}', b'{"toolsets": ["web"]}', b'{"skills": null}']
)
async def test_a_malformed_payload_is_an_error_not_an_empty_catalog(
    redis: Any, keys: Keys, raw: bytes
) -> None:
    await redis.set(keys.catalog, raw, ex=60)
    with pytest.raises(ValueError):
        await read_catalog(redis, keys)
