"""A failover can lose the newest entries of a stream after readers saw them; the run then goes
on with the same seq numbers under new ids. Readers must be told (``stream.gap``), and must get
the new entries: none may be skipped as "already read" because its seq looks familiar."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from hermes_queue.events import EventType
from hermes_queue.keys import Keys
from hermes_queue.streams.hub import StreamHub
from tests.streams.test_hub import take, write_run, xadd


@pytest.fixture
async def hub(redis_url: str, keys: Keys) -> AsyncIterator[StreamHub]:
    started = StreamHub(redis_url, keys, poll_ms=60_000)  # the poll must not paper over a skip
    await started.start()
    yield started
    await started.aclose()


async def lose_newest(redis: aioredis.Redis, keys: Keys, run_id: str, ids: list[str]) -> None:
    """What a promoted replica that never got these entries holds: the stream without them."""
    await redis.xdel(keys.events(run_id), *ids)


async def test_live_reader_is_told_and_gets_every_new_entry(
    redis: aioredis.Redis, keys: Keys, hub: StreamHub
) -> None:
    ids = await write_run(redis, keys, "r1", 6)
    async with hub.subscribe("r1") as sub:
        assert [e.seq for e in await take(sub, 6)] == [1, 2, 3, 4, 5, 6]
        await lose_newest(redis, keys, "r1", ids[4:])
        for seq in (5, 6, 7):
            await xadd(redis, keys, "r1", seq, data={"again": seq})
        await xadd(redis, keys, "r1", 8, EventType.RUN_COMPLETED)
        tail = await take(sub, 5)
    assert tail[0].type == EventType.STREAM_GAP
    assert tail[0].data["missed_from"] == ids[5]
    assert [(e.seq, e.data) for e in tail[1:4]] == [(s, {"again": s}) for s in (5, 6, 7)]
    assert tail[4].terminal


async def test_reader_already_past_the_lost_entries_is_told_once(
    redis: aioredis.Redis, keys: Keys, hub: StreamHub
) -> None:
    ids = await write_run(redis, keys, "r2", 3)
    async with hub.subscribe("r2") as sub:
        await take(sub, 3)
        await lose_newest(redis, keys, "r2", ids[1:])
        for seq in (2, 3, 4):
            await xadd(redis, keys, "r2", seq)
        tail = await take(sub, 4)
    assert [e.type for e in tail].count(EventType.STREAM_GAP) == 1
    assert [e.seq for e in tail if e.type != EventType.STREAM_GAP] == [2, 3, 4]
