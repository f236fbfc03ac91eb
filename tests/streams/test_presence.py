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
from tests.support.polling import eventually
from tests.support.redis_stats import commands_for


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


async def vouch_as_the_creating_script(redis: aioredis.Redis, key: str, reader: str) -> float:
    """The entry ``create_session_run.lua`` writes for the request that starts a session run;
    its score (ms, Redis clock)."""
    seconds, micros = await redis.time()
    score = seconds * 1000 + micros // 1000 + 6_000
    await redis.zadd(key, {reader: score})
    return float(score)


async def test_a_reader_whose_entry_the_creating_script_wrote_writes_nothing_then_renews(
    private: aioredis.Redis,
) -> None:
    keys = Keys("presence")
    key = keys.readers("run_new")
    presence = ReaderPresence(private, keys, "api-one", renew_seconds=0.2)
    written = await vouch_as_the_creating_script(private, key, "api-one")
    presence.start()
    try:

        async def follow() -> None:
            presence.enter("run_new", written=True)
            await presence.flush()

        assert (await commands_for(private, follow)).total() == 0
        renewed = await eventually(
            lambda: private.zscore(key, "api-one"),
            lambda score: score is not None and score > written,
            what="the renewals taking the entry over",
        )
        assert renewed is not None
        presence.leave("run_new")
        await presence.flush()
        assert not await private.exists(key)  # left: at once, as any reader
    finally:
        await presence.aclose()


async def test_a_written_entry_does_not_skip_a_change_still_pending(
    private: aioredis.Redis,
) -> None:
    """A leave not yet written, then an entry said written: the leave must not land last."""
    keys = Keys("presence")
    key = keys.readers("run_a")
    presence = ReaderPresence(private, keys, "api-one")
    presence.enter("run_a")
    presence.leave("run_a")  # both pending: the writer task has not started
    await vouch_as_the_creating_script(private, key, "api-one")
    presence.enter("run_a", written=True)
    presence.start()
    try:
        await presence.flush()
        assert await private.zscore(key, "api-one") is not None
    finally:
        await presence.aclose()


async def test_a_reader_that_saw_its_run_end_leaves_its_entry_to_lapse(
    private: aioredis.Redis,
) -> None:
    """An ended run is never judged abandoned, so a reader leaving it writes nothing: its
    entry lapses by itself (no renewal here); an entry not written yet is not written at all."""
    keys = Keys("presence")
    presence = ReaderPresence(private, keys, "api-one", ttl_ms=500, renew_seconds=60)
    presence.start()
    try:
        presence.enter("run_done")
        await presence.flush()

        async def leave_ended() -> None:
            presence.leave("run_done", ended=True)
            presence.enter("run_brief")  # pending, then its reader sees the end at once
            presence.leave("run_brief", ended=True)
            await presence.flush()

        assert (await commands_for(private, leave_ended)).total() == 0
        assert await private.zscore(keys.readers("run_done"), "api-one") is not None
        await eventually(lambda: private.exists(keys.readers("run_done")), lambda n: n == 0)
        assert not await private.exists(keys.readers("run_brief"))
    finally:
        await presence.aclose()
