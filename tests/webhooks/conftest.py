from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hermes_queue.client import HermesQueueClient
from hermes_queue.config import Settings
from tests.support.processes import Cluster
from tests.support.webhook_receiver import Receiver, new_secret, receiving


@pytest.fixture
def secrets() -> list[str]:
    """Two secrets, as during a rotation: every delivery carries one signature per secret."""
    return [new_secret(), new_secret()]


@pytest.fixture
def hook_settings(settings: Settings, secrets: list[str]) -> Settings:
    """Webhooks on a short schedule (two retries, 0.3 s apart), 127.0.0.1 allow-listed."""
    return settings.replace(
        webhook_secret=tuple(secrets),
        webhook_allowed_hosts=("127.0.0.1",),
        webhook_retry_schedule=("0.3s", "0.3s"),
        webhook_poll_seconds=0.1,
        webhook_timeout_seconds=2.0,
    ).validate()


@pytest.fixture
async def receiver(secrets: list[str]) -> AsyncIterator[Receiver]:
    async with receiving(secrets) as started:
        yield started


@pytest.fixture
async def cluster(hook_settings: Settings) -> AsyncIterator[Cluster]:
    started = Cluster(hook_settings)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def client_for(hook_settings: Settings):  # type: ignore[no-untyped-def]
    def make(url: str) -> HermesQueueClient:
        return HermesQueueClient(url, hook_settings.api.api_key, reconnect_delay=0.05)

    return make
