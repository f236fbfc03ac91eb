from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from hermes_queue.api.app import create_app
from hermes_queue.config import Settings
from hermes_queue.workers.worker import WakeableWorker, build_worker


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[TestClient]:
    client = TestClient(TestServer(create_app(settings)))
    await client.start_server()
    client.session.headers["Authorization"] = f"Bearer {settings.api_key}"
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def worker(settings: Settings) -> AsyncIterator[WakeableWorker]:
    """An in-process worker (same event loop), for tests that only need runs to run."""
    built = build_worker(settings, handle_signals=False)
    task = asyncio.create_task(built.main())
    try:
        yield built
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await built.close()
