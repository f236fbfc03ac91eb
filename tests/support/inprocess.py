"""The API and a worker inside the test's own event loop (no OS process): for tests that drive
the API through aiohttp's ``TestClient`` and only need runs to run."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from aiohttp.test_utils import TestClient, TestServer

from hermes_queue.api.app import create_app
from hermes_queue.config import Settings
from hermes_queue.jobqueue.worker import WakeableWorker
from hermes_queue.workers.worker import build_worker

if TYPE_CHECKING:
    from hermes_queue.tracing.spans import Tracing


@contextlib.asynccontextmanager
async def running_api(
    settings: Settings, tracing: Tracing | None = None
) -> AsyncIterator[TestClient]:
    """An API on a loopback port, its client sending ``settings.api.api_key``."""
    client = TestClient(TestServer(create_app(settings, tracing)))
    await client.start_server()
    client.session.headers["Authorization"] = f"Bearer {settings.api.api_key}"
    try:
        yield client
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def running_worker(
    settings: Settings, tracing: Tracing | None = None
) -> AsyncIterator[WakeableWorker]:
    """An in-process worker (same event loop), listening for wake-ups when this yields."""
    built = build_worker(settings, handle_signals=False, tracing=tracing)
    task = asyncio.create_task(built.main())
    try:
        await asyncio.wait_for(built.listening.wait(), 10)
        yield built
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await built.close()
