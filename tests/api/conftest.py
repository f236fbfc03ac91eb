from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient

from hermes_queue.config import Settings
from hermes_queue.jobqueue.worker import WakeableWorker
from tests.support.inprocess import running_api, running_worker


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
