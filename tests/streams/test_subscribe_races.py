"""The hub's channel subscriptions under races, and its poll: streams followed in bursts
while they are written, and followed again while their channel is still subscribed (its
UNSUBSCRIBE deferred to the poll). Every test uses a 30 s poll unless it is about the poll, so
an entry the subscriptions let slip through shows as a timeout, not rescued by the poll."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable

import redis.asyncio as aioredis

from hermes_queue.events import EventType
from hermes_queue.keys import Keys
from hermes_queue.streams.reader import read_range
from tests.streams.conftest import MakeHub
from tests.streams.test_hub import GatedRedis, drain, take, write_run, xadd
from tests.support.polling import eventually


async def subscribers(redis: aioredis.Redis, channel: str) -> int:
    """Redis's view of the hub's subscriptions, to poll: there is nothing to wait on."""
    [(_name, count)] = await redis.pubsub_numsub(channel)
    return int(count)


async def test_a_burst_of_subscriptions_to_streams_being_written_misses_nothing(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    """Subscribers open in a burst (one SUBSCRIBE, its confirmations heard together) at random
    points of their runs while the runs are written: each gets every entry once, in order."""
    hub = await make_hub(poll_ms=30_000)
    runs = [f"burst{i}" for i in range(24)]
    rng = random.Random(14)
    starts = {run_id: rng.randrange(0, 12) for run_id in runs}
    started = {run_id: asyncio.Event() for run_id in runs}

    async def write(run_id: str) -> None:
        for seq in range(1, 31):
            if seq == starts[run_id]:
                started[run_id].set()
            await xadd(redis, keys, run_id, seq)
        started[run_id].set()
        await xadd(redis, keys, run_id, 31, EventType.RUN_COMPLETED)

    async def read(run_id: str, after_writes: bool) -> list[str]:
        if after_writes:
            await started[run_id].wait()
        async with hub.subscribe(run_id) as sub:
            return [event.id for event in await drain(sub, within=10)]

    readers = [asyncio.create_task(read(run_id, i % 2 == 0)) for i, run_id in enumerate(runs)]
    await asyncio.sleep(0)  # the readers that do not wait attach before the first write
    await asyncio.gather(*(write(run_id) for run_id in runs))
    results = await asyncio.wait_for(asyncio.gather(*readers), 15)
    for run_id, got in zip(runs, results, strict=True):
        expected = [event.id for event in await read_range(redis, keys, run_id, None, 100)]
        assert len(expected) == 31
        assert got == expected, run_id


async def test_a_stream_followed_again_while_its_channel_lingers_misses_nothing(
    redis: aioredis.Redis, redis_url: str, keys: Keys, make_hub: MakeHub
) -> None:
    """A left, so nobody follows the stream, but its channel stays subscribed until the poll.
    B replays, and entries written before B follows are heard on that channel and dropped:
    B's own SUBSCRIBE (sent again) is confirmed, and the read after it finds them."""
    shared = aioredis.Redis.from_url(redis_url)
    gated = GatedRedis(shared)
    try:
        hub = await make_hub(redis=gated, poll_ms=30_000)
        channel = keys.events("r1")
        ids = await write_run(redis, keys, "r1", 2)
        async with hub.subscribe("r1") as a:
            assert [e.id for e in await take(a, 2)] == ids
            assert await a.get(timeout=0.01) is None  # live: the hub follows r1
            await eventually(lambda: _is(subscribers(redis, channel), 1), within=5, every=0.01)
        assert hub.stats()["reading"] == 0
        release = gated.gate = asyncio.Event()
        async with hub.subscribe("r1") as b:
            first = asyncio.create_task(take(b, 2))
            await asyncio.wait_for(gated.held.wait(), 5)  # B has read 1..2, reply held
            ids += await write_run(redis, keys, "r1", 2, start=3)
            await asyncio.sleep(0.05)  # their messages reach the hub, which follows no r1
            assert await subscribers(redis, channel) == 1  # the channel lingers
            release.set()
            got = [e.id for e in await first] + [e.id for e in await take(b, 2)]
            assert got == ids
            ids.append(await xadd(redis, keys, "r1", 5, EventType.RUN_COMPLETED))
            assert [e.id for e in await drain(b)] == ids[4:]
    finally:
        await shared.aclose()


async def test_a_channel_nobody_follows_is_unsubscribed_at_the_poll(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    hub = await make_hub(poll_ms=200)
    channels = [keys.events(f"r{i}") for i in range(3)]
    async with hub.subscribe("r0") as r0, hub.subscribe("r1") as r1, hub.subscribe("r2") as r2:
        for sub in (r0, r1, r2):
            assert await sub.get(timeout=0.01) is None  # live
        for channel in channels:
            await eventually(
                lambda channel=channel: _is(subscribers(redis, channel), 1), within=5, every=0.01
            )
    await eventually(lambda: _all_zero(redis, channels), within=3, every=0.01)
    async with hub.subscribe("r1") as again:  # subscribed anew
        assert await again.get(timeout=0.01) is None
        await xadd(redis, keys, "r1", 1)
        assert [e.seq for e in await take(again, 1)] == [1]


async def _is(count: Awaitable[int], expected: int) -> bool:
    return await count == expected


async def _all_zero(redis: aioredis.Redis, channels: list[str]) -> bool:
    return all([await subscribers(redis, channel) == 0 for channel in channels])


async def test_the_poll_reads_the_followed_streams_once_a_period(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    """The poll's XREAD names every followed stream, so its cost grows with them: once a
    period, not twice (the wait for messages timing out at the poll is not a second poll)."""
    hub = await make_hub(poll_ms=100)
    async with hub.subscribe("quiet") as sub:
        assert await sub.get(timeout=0.01) is None  # live
        before = hub.follower.xreads
        await asyncio.sleep(1.0)
        polls = hub.follower.xreads - before
    assert 1 <= polls <= 13  # ~10; it was ~20
