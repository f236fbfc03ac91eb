"""Workers publish their backend's catalog at startup and then periodically; failures never
stop them, and backends without a catalog publish nothing."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from hermes_queue.agents.catalog import BackendCatalog, CatalogSource
from hermes_queue.agents.echo import EchoBackend
from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.runs.catalog import TTL_SECONDS, read_catalog
from hermes_queue.workers import worker as worker_module
from hermes_queue.workers.catalog import publish_forever
from tests.api.conftest import running_worker
from tests.runs.test_catalog import CATALOG


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


async def _until(predicate: Any, within: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.02)


async def test_a_worker_publishes_its_backends_catalog(
    redis: Any, keys: Keys, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = CatalogEcho()
    monkeypatch.setattr(worker_module, "load_backend", lambda name, **options: backend)

    async def published() -> bool:
        return await read_catalog(redis, keys) is not None

    async with running_worker(settings):
        await _until(published)
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

        with caplog.at_level(logging.ERROR, logger="hermes_queue.workers.catalog"):
            await _until(failed_twice)
        assert "could not list its catalog" in caplog.text
        assert await redis.exists(keys.catalog) == 0

        backend.fail = False
        backend.skills = []

        async def refreshed() -> bool:
            catalog = await read_catalog(redis, keys)
            return catalog is not None and catalog.skills == []

        await _until(refreshed)
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
    with caplog.at_level(logging.WARNING, logger="hermes_queue.workers.catalog"):
        task = asyncio.create_task(publish_forever(redis, keys, backend, interval=0.05, ttl=5))
        try:

            async def retried() -> bool:
                return backend.calls >= 2

            await _until(retried)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert "took over" in caplog.text
