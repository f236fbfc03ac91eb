"""Reader presence (``streams/presence.py``) on a private Redis: a process's readers of a run
are in the run's readers set, and a Redis that lost its scripts (a restart, a promoted
replica) still gets them written, the script loaded again on the spot."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from hermes_queue.keys import Keys
from hermes_queue.redisio.embedded import EmbeddedRedis
from hermes_queue.streams.presence import ReaderPresence


@pytest.fixture
async def private() -> AsyncIterator[aioredis.Redis]:
    server = EmbeddedRedis.start()  # its scripts are flushed below: no other test's Redis
    client = aioredis.Redis.from_url(server.url)
    try:
        yield client
    finally:
        await client.aclose()
        server.stop()


async def test_readers_are_written_and_survive_a_redis_that_lost_its_scripts(
    private: aioredis.Redis,
) -> None:
    keys = Keys("presence")
    presence = ReaderPresence(private, keys, "api-one")
    presence.start()
    try:
        presence.enter("run_a")
        await presence.flush()
        assert await private.zscore(keys.readers("run_a"), "api-one") is not None
        await private.script_flush()
        presence.enter("run_b")
        presence.leave("run_a")
        await presence.flush()
        assert await private.zscore(keys.readers("run_b"), "api-one") is not None
        assert not await private.exists(keys.readers("run_a"))  # left: at once
    finally:
        await presence.aclose()
