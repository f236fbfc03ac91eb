"""The backend catalog end to end below the API: its bytes, Redis round trip and TTL, and the
worker publishing it at startup and periodically (failures never stop it; backends without a
catalog publish nothing).

``CATALOG`` is the sample the API's catalog tests use too.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from hermes_queue.agents.echo import EchoBackend
from hermes_queue.catalog import (
    TTL_SECONDS,
    BackendCatalog,
    CatalogSource,
    publish_catalog,
    publish_forever,
    read_catalog,
)
from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.workers import worker as worker_module
from tests.support.inprocess import running_worker
from tests.support.polling import eventually

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


class CatalogEcho(EchoBackend):
    """Echo with a catalog; ``fail`` makes the next calls raise."""

    def __init__(self) -> None:
        super().__init__(0.0)
        self.calls = 0
        self.fail = False
        self.skills = CATALOG.skills

    async def catalog(self) -> BackendCatalog:
        self.calls += 1
        if self.fail:
            raise RuntimeError("skills directory unreadable")
        return BackendCatalog(skills=list(self.skills), toolsets=CATALOG.toolsets)


async def test_a_worker_publishes_its_backends_catalog(
    redis: Any, keys: Keys, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = CatalogEcho()
    monkeypatch.setattr(worker_module, "load_backend", lambda name, **options: backend)

    async def published() -> bool:
        return await read_catalog(redis, keys) is not None

    async with running_worker(settings):
        await eventually(published, within=5, every=0.02)
        assert await read_catalog(redis, keys) == CATALOG
        assert 0 < await redis.ttl(keys.catalog) <= TTL_SECONDS


async def test_echo_publishes_nothing(redis: Any, keys: Keys, settings: Settings) -> None:
    assert not isinstance(EchoBackend(), CatalogSource)
    assert isinstance(CatalogEcho(), CatalogSource)
    async with running_worker(settings):
        await asyncio.sleep(0.2)
        assert await redis.exists(keys.catalog) == 0


async def test_refresh_survives_failures(
    redis: Any, keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    backend = CatalogEcho()
    backend.fail = True
    task = asyncio.create_task(publish_forever(redis, keys, backend, interval=0.05, ttl=5))
    try:

        async def failed_twice() -> bool:
            return backend.calls >= 2

        with caplog.at_level(logging.ERROR, logger="hermes_queue.catalog"):
            await eventually(failed_twice, within=5, every=0.02)
        assert "could not list its catalog" in caplog.text
        assert await redis.exists(keys.catalog) == 0

        backend.fail = False
        backend.skills = []

        async def refreshed() -> bool:
            catalog = await read_catalog(redis, keys)
            return catalog is not None and catalog.skills == []

        await eventually(refreshed, within=5, every=0.02)
        assert not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_hung_catalog_call_is_bounded(
    redis: Any, keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    class Hung(CatalogEcho):
        async def catalog(self) -> BackendCatalog:
            self.calls += 1
            await asyncio.sleep(3600)
            raise AssertionError("unreachable")

    backend = Hung()
    with caplog.at_level(logging.WARNING, logger="hermes_queue.catalog"):
        task = asyncio.create_task(publish_forever(redis, keys, backend, interval=0.05, ttl=5))
        try:

            async def retried() -> bool:
                return backend.calls >= 2

            await eventually(retried, within=5, every=0.02)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert "took over" in caplog.text
