from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hermes_queue.client import HermesQueueClient
from hermes_queue.config import Settings
from tests.support.processes import Cluster


@pytest.fixture
async def cluster(settings: Settings) -> AsyncIterator[Cluster]:
    started = Cluster(settings)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def client_for(settings: Settings):  # type: ignore[no-untyped-def]
    def make(url: str) -> HermesQueueClient:
        return HermesQueueClient(url, settings.api.api_key, reconnect_delay=0.05)

    return make
