from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from hermes_queue.api.app import create_app
from hermes_queue.config import Settings
from hermes_queue.jobqueue.worker import WakeableWorker
from hermes_queue.workers.worker import build_worker


@contextlib.asynccontextmanager
async def running_api(settings: Settings) -> AsyncIterator[TestClient]:
    client = TestClient(TestServer(create_app(settings)))
    await client.start_server()
    client.session.headers["Authorization"] = f"Bearer {settings.api_key}"
    try:
        yield client
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def running_worker(settings: Settings) -> AsyncIterator[WakeableWorker]:
    """An in-process worker (same event loop), for tests that only need runs to run."""
    built = build_worker(settings, handle_signals=False)
    task = asyncio.create_task(built.main())
    try:
        await asyncio.wait_for(built.listening.wait(), 10)
        yield built
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await built.close()


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[TestClient]:
    async with running_api(settings) as client:
        yield client


@pytest.fixture
async def worker(settings: Settings) -> AsyncIterator[WakeableWorker]:
    async with running_worker(settings) as built:
        yield built


@pytest.fixture
async def session_api(store_settings: Settings) -> AsyncIterator[TestClient]:
    """The API on each session store (SQLite, PostgreSQL)."""
    async with running_api(store_settings) as client:
        yield client


@pytest.fixture
async def session_worker(store_settings: Settings) -> AsyncIterator[WakeableWorker]:
    async with running_worker(store_settings) as built:
        yield built
