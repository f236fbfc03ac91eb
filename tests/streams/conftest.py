"""Stream hubs for the tests of this folder, each closed when its test ends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from hermes_queue.keys import Keys
from hermes_queue.streams.hub import StreamHub

MakeHub = Callable[..., Awaitable[StreamHub]]


@pytest.fixture
async def make_hub(redis_url: str, keys: Keys) -> AsyncIterator[MakeHub]:
    hubs: list[StreamHub] = []

    async def make(**kwargs: Any) -> StreamHub:
        hub = StreamHub(kwargs.pop("redis", redis_url), keys, **kwargs)
        await hub.start()
        hubs.append(hub)
        return hub

    yield make
    for hub in hubs:
        await hub.aclose()
