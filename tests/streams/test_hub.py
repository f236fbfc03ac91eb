"""StreamHub against a real Redis: delivery contract, bounded resources, gaps, resilience."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from hermes_queue.events import EventType, RunEvent
from hermes_queue.keys import Keys
from hermes_queue.streams import follower as follower_module
from hermes_queue.streams.codec import entry_fields, published
from hermes_queue.streams.hub import StreamHub, Subscription
from hermes_queue.streams.reader import read_range
from tests.streams.conftest import MakeHub
from tests.support.polling import eventually


async def xadd(
    redis: aioredis.Redis,
    keys: Keys,
    run_id: str,
    seq: int,
    type_: str = EventType.MESSAGE_DELTA,
    data: dict[str, Any] | None = None,
) -> str:
    """Append one entry the way the run scripts do, and publish it on the stream's channel as
    they do (``streams/entry.lua``, mirrored by ``streams/codec.py``)."""
    data = data if data is not None else {"n": seq}
    fields = entry_fields(type_, seq, 1, time.time(), "sess", data)
    raw_id = await redis.xadd(keys.events(run_id), dict(fields))
    entry_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
    await redis.publish(keys.events(run_id), published(entry_id, fields))
    return entry_id


async def write_run(
    redis: aioredis.Redis, keys: Keys, run_id: str, n: int, *, start: int = 1, end: bool = False
) -> list[str]:
    ids = [await xadd(redis, keys, run_id, seq) for seq in range(start, start + n)]
    if end:
        ids.append(await xadd(redis, keys, run_id, start + n, EventType.RUN_COMPLETED))
    return ids


async def take(sub: Subscription, n: int, within: float = 5.0) -> list[RunEvent]:
    async def collect() -> list[RunEvent]:
        out = []
        while len(out) < n:
            event = await sub.get()
            assert event is not None, "subscription ended early"
            out.append(event)
        return out

    return await asyncio.wait_for(collect(), within)


async def drain(sub: Subscription, within: float = 5.0) -> list[RunEvent]:
    async def collect() -> list[RunEvent]:
        return [event async for event in sub]

    return await asyncio.wait_for(collect(), within)


async def test_history_then_live_tail(redis: aioredis.Redis, keys: Keys, make_hub: MakeHub) -> None:
    hub = await make_hub()
    history = await write_run(redis, keys, "r1", 5)
    async with hub.subscribe("r1") as sub:
        first = await take(sub, 5)
        assert [e.id for e in first] == history
        assert [e.seq for e in first] == [1, 2, 3, 4, 5]
        assert first[0].data == {"n": 1} and first[0].session_id == "sess"
        live = await write_run(redis, keys, "r1", 5, start=6, end=True)
        rest = await drain(sub)
    assert [e.id for e in rest] == live
    assert rest[-1].type == EventType.RUN_COMPLETED and sub.finished
    assert hub.stats() == {"subscribers": 0, "streams": 0, "reading": 0}


async def test_cursor_mid_stream(redis: aioredis.Redis, keys: Keys, make_hub: MakeHub) -> None:
    hub = await make_hub()
    ids = await write_run(redis, keys, "r1", 10, end=True)
    async with hub.subscribe("r1", after=ids[4]) as sub:
        events = await drain(sub)
    assert [e.id for e in events] == ids[5:]
    async with hub.subscribe("r1", after="0") as sub:  # a bare millisecond cursor is "<ms>-0"
        assert [e.id for e in await drain(sub)] == ids
    with pytest.raises(ValueError):  # a malformed cursor is refused (the API answers 400)
        async with hub.subscribe("r1", after="nope"):
            pass


async def test_many_subscribers_see_identical_sequences(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    hub = await make_hub(count=7)  # small pages: long replays that overlap the live tail
    await write_run(redis, keys, "r1", 20)

    async def consume() -> list[str]:
        async with hub.subscribe("r1") as sub:
            return [e.id async for e in sub]

    tasks = []
    seq = 20
    for _ in range(50):  # subscribers join while entries keep arriving and the hub tails them
        tasks.append(asyncio.create_task(consume()))
        for _ in range(3):
            seq += 1
            await xadd(redis, keys, "r1", seq)
    await xadd(redis, keys, "r1", seq + 1, EventType.RUN_FAILED)
    results = await asyncio.wait_for(asyncio.gather(*tasks), 10)
    expected = [e.id for e in await read_range(redis, keys, "r1", None, 1000)]
    assert len(expected) == 171
    for result in results:
        assert result == expected


class GatedRedis:
    """The shared client, except that one chosen XRANGE reply is held back until released."""

    def __init__(self, inner: aioredis.Redis) -> None:
        self.inner = inner
        self.gate: asyncio.Event | None = None
        self.held = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def xrange(self, *args: Any, **kwargs: Any) -> Any:
        rows = await self.inner.xrange(*args, **kwargs)
        gate, self.gate = self.gate, None
        if gate is not None:
            self.held.set()
            await gate.wait()
        return rows


async def test_slow_replay_of_a_new_stream_catches_up_to_the_hub(
    redis: aioredis.Redis, redis_url: str, keys: Keys, make_hub: MakeHub
) -> None:
    """B's replay read the stream before A's, but A started the hub's tail further on: B must
    replay the difference instead of going live with a hole."""
    shared = aioredis.Redis.from_url(redis_url)
    gated = GatedRedis(shared)
    try:
        hub = await make_hub(redis=gated)
        ids = await write_run(redis, keys, "r1", 3)
        release = gated.gate = asyncio.Event()
        async with hub.subscribe("r1") as b, hub.subscribe("r1") as a:
            b_first = asyncio.create_task(b.get())
            await asyncio.wait_for(gated.held.wait(), 5)  # B has read 1..3, reply held
            ids += await write_run(redis, keys, "r1", 2, start=4)
            assert [e.id for e in await take(a, 5)] == ids
            assert await a.get(timeout=0.01) is None  # A is live: the hub tails from entry 5
            release.set()
            await b_first
            ids += await write_run(redis, keys, "r1", 1, start=6, end=True)
            got_b = [(await b_first).id] + [e.id for e in await drain(b)]
            got_a = [e.id for e in await drain(a)]
        assert got_b == ids and got_a == ids[5:]
    finally:
        await shared.aclose()


async def test_a_stream_followed_while_the_reader_waits_is_read_when_it_grows(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    # A 30 s poll: delivery within 5 s proves the announcement, not the poll, brought it.
    hub = await make_hub(poll_ms=30_000)
    async with hub.subscribe("busy") as busy:
        assert await busy.get(timeout=0.01) is None  # replayed (nothing), now live
        await xadd(redis, keys, "busy", 1)
        await take(busy, 1)  # read after its announcement
        async with hub.subscribe("later") as sub:
            assert await sub.get(timeout=0.05) is None  # nothing yet: keepalive path
            assert hub.stats()["reading"] == 2
            ids = await write_run(redis, keys, "later", 3)
            events = await take(sub, 3, within=5.0)
        assert [e.id for e in events] == ids
        await xadd(redis, keys, "busy", 2)
        assert [e.seq for e in await take(busy, 1)] == [2]


async def test_entries_written_before_the_subscription_took_effect_are_not_missed(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    """Written after the replay but unannounced to us (not yet subscribed, or a writer that
    does not announce at all): read on the subscription's confirmation, else by the poll."""
    hub = await make_hub(poll_ms=300)
    async with hub.subscribe("quiet") as sub:
        assert await sub.get(timeout=0.01) is None
        entry = await redis.xadd(keys.events("quiet"), {"t": "message.delta", "s": 1, "d": "{}"})
        events = await take(sub, 1, within=5.0)  # no announcement: the poll finds it
    assert [e.id for e in events] == [entry.decode()]


async def test_reading_cost_does_not_grow_with_the_streams_followed(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    """An event on one stream costs at most an XREAD of that stream alone, however many other
    streams the hub follows (the old blocking XREAD named every one of them, every time); once
    the hub knows where the stream is, the published entry itself is enough."""
    hub = await make_hub(poll_ms=30_000)
    sizes: list[int] = []
    pack = hub.follower._pack_xread

    def counting_pack(reading: dict[str, Any]) -> bytes:
        sizes.append(len(reading))
        return pack(reading)

    hub.follower._pack_xread = counting_pack  # type: ignore[method-assign]
    async with contextlib.AsyncExitStack() as stack:
        for i in range(50):
            idle = await stack.enter_async_context(hub.subscribe(f"idle{i}"))
            assert await idle.get(timeout=0.01) is None
        hot = await stack.enter_async_context(hub.subscribe("hot"))
        assert await hot.get(timeout=0.01) is None
        sizes.clear()
        for seq in range(1, 11):
            await xadd(redis, keys, "hot", seq)
            assert [e.seq for e in await take(hot, 1)] == [seq]
    assert max(sizes, default=1) == 1
    assert len(sizes) <= 2  # the first entry (where is the stream?), and a confirmation at most


async def test_a_published_entry_out_of_order_is_read_from_the_stream(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    """The stream decides: a message that skips a seq (one was lost) makes the hub read the
    stream from its cursor; one already read is ignored; nothing is delivered twice."""
    hub = await make_hub(poll_ms=30_000)
    async with hub.subscribe("r1") as sub:
        assert await sub.get(timeout=0.01) is None
        first = await write_run(redis, keys, "r1", 2)
        assert [e.id for e in await take(sub, 2)] == first
        # A copy of seq 2's message arrives again: already delivered, ignored.
        again = [first[1], "message.delta", "2", "1", repr(time.time()), "sess", "{}"]
        await redis.publish(keys.events("r1"), "\0".join(again))
        # Seq 3 written unpublished (lost), then 4 published: 4 does not follow 2.
        lost = await redis.xadd(keys.events("r1"), {"t": "message.delta", "s": 3, "d": "{}"})
        four = await xadd(redis, keys, "r1", 4)
        end = await xadd(redis, keys, "r1", 5, EventType.RUN_COMPLETED)
        rest = await drain(sub)
    assert [e.id for e in rest] == [lost.decode(), four, end]


async def test_connection_count_is_constant(
    redis: aioredis.Redis, redis_url: str, keys: Keys, namespace: str, make_hub: MakeHub
) -> None:
    shared = aioredis.Redis.from_url(redis_url, client_name=f"{namespace}-pool")
    try:
        hub = await make_hub(
            redis=shared, client_name=f"{namespace}-hub", replay_concurrency=4, poll_ms=30_000
        )

        async def connections() -> tuple[int, int]:
            clients = await redis.client_list()
            names = [c["name"] for c in clients if c["name"].startswith(namespace)]
            return len(names), names.count(f"{namespace}-hub")

        async def watch(n: int) -> list[tuple[int, int]]:
            ready = asyncio.Barrier(n + 1)
            counts: list[tuple[int, int]] = []
            reads = hub.follower.xreads

            async def one(i: int) -> None:
                async with hub.subscribe(f"run{n}-{i}") as sub:
                    assert await sub.get(timeout=0.01) is None  # replay done, now live
                    await ready.wait()
                    event = await sub.get(timeout=5)
                    assert event is not None and event.seq == 1
                    await ready.wait()

            tasks = [asyncio.create_task(one(i)) for i in range(n)]
            await asyncio.wait_for(ready.wait(), 10)
            # Live once replayed; the follower's reading connection exists once it read the
            # streams after their subscriptions took effect, which a loaded machine delays.
            await eventually(lambda: hub.follower.xreads > reads, what="the follower reading")
            counts.append(await connections())
            assert hub.stats()["streams"] == hub.stats()["reading"] == n
            for i in range(n):
                await xadd(redis, keys, f"run{n}-{i}", 1)
            await asyncio.wait_for(ready.wait(), 10)
            counts.append(await connections())
            await asyncio.gather(*tasks)
            return counts

        one_sub = await watch(1)
        many = await watch(200)
        for total, hub_conns in one_sub + many:
            assert hub_conns == 1
            assert total <= 1 + 4 + 1  # hub + replay slots + unblocker, independent of n
        assert hub.stats()["streams"] == 0
    finally:
        await shared.aclose()


async def test_slow_consumer_is_detached_then_replays(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    size = 10
    hub = await make_hub(queue_size=size)
    async with hub.subscribe("r1") as slow, hub.subscribe("r1") as fast:
        assert await slow.get(timeout=0.01) is None
        assert await fast.get(timeout=0.01) is None
        ids = []
        for seq in range(1, 5 * size + 1):  # the slow one reads nothing meanwhile
            ids.append(await xadd(redis, keys, "r1", seq))
            event = await asyncio.wait_for(fast.get(), 5)
            assert event is not None and event.id == ids[-1]
        assert fast.overflows == 0
        assert slow.overflows >= 1 and slow.buffered <= size
        ids.append(await xadd(redis, keys, "r1", 5 * size + 1, EventType.RUN_CANCELLED))
        events = await drain(slow)
    assert [e.id for e in events] == ids
    assert [e.seq for e in events] == list(range(1, 5 * size + 2))


async def test_gap_event_when_cursor_was_trimmed(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    hub = await make_hub()
    ids = await write_run(redis, keys, "r1", 10, end=True)
    await redis.xtrim(keys.events("r1"), maxlen=6, approximate=False)  # keeps seq 6..11

    async with hub.subscribe("r1") as sub:  # fresh: seq 1 is gone
        events = await drain(sub)
    assert events[0].type == EventType.STREAM_GAP and events[0].id == ""
    assert events[0].data == {"first_available_id": ids[5], "missed_from": "0-0"}
    assert [e.id for e in events[1:]] == ids[5:]

    async with hub.subscribe("r1", after=ids[1]) as sub:  # cursor trimmed away
        events = await drain(sub)
    assert events[0].type == EventType.STREAM_GAP
    assert events[0].data == {"first_available_id": ids[5], "missed_from": ids[1]}
    assert [e.id for e in events[1:]] == ids[5:]

    async with hub.subscribe("r1", after=ids[6]) as sub:  # cursor still held: no gap
        assert [e.id for e in await drain(sub)] == ids[7:]

    await redis.xdel(keys.events("r1"), ids[7])  # deleted mid-stream, not trimmed: no gap
    async with hub.subscribe("r1", after=ids[7]) as sub:
        assert [e.id for e in await drain(sub)] == ids[8:]

    async with hub.subscribe("r1", after="0-0") as sub:  # explicit start: never a gap
        events = await drain(sub)
    assert events[0].type != EventType.STREAM_GAP and events[0].id == ids[5]


async def test_terminal_event_ends_iteration(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    hub = await make_hub()
    ids = await write_run(redis, keys, "r1", 2, end=True)
    await xadd(redis, keys, "r1", 99)  # written after the end: never delivered
    async with hub.subscribe("r1") as sub:
        events = await drain(sub)
        assert await sub.get(timeout=0.01) is None and sub.finished
        assert hub.stats()["streams"] == 0  # detached as soon as the end was seen
    assert [e.id for e in events] == ids and events[-1].terminal


async def test_survives_client_kill(redis: aioredis.Redis, keys: Keys, make_hub: MakeHub) -> None:
    hub = await make_hub(poll_ms=30_000)
    async with hub.subscribe("r1") as sub:
        assert await sub.get(timeout=0.01) is None
        first = await write_run(redis, keys, "r1", 3)
        assert [e.id for e in await take(sub, 3)] == first  # via the hub's connection
        killed = hub.follower.listener_client_id
        assert killed is not None
        assert await redis.client_kill_filter(_id=killed) == 1
        # Written while the hub is deaf: read after it reconnects, not at the 30 s poll.
        more = await write_run(redis, keys, "r1", 3, start=4, end=True)
        rest = await asyncio.wait_for(drain(sub), 10)
    assert [e.id for e in rest] == more
    assert hub.follower.listener_client_id not in (None, killed)


async def test_malformed_entry_does_not_stop_the_hub(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    hub = await make_hub()
    async with hub.subscribe("bad") as bad, hub.subscribe("good") as good:
        assert await bad.get(timeout=0.01) is None and await good.get(timeout=0.01) is None
        await redis.xadd(keys.events("bad"), {"t": "message.delta", "s": 1, "d": "{not json"})
        await redis.publish(keys.events("bad"), "")
        with pytest.raises(ValueError):
            await asyncio.wait_for(bad.get(), 5)  # surfaces to this run's client only
        ids = await write_run(redis, keys, "good", 2, end=True)
        assert [e.id for e in await drain(good)] == ids


async def test_idle_hub_and_lifecycle(redis_url: str, keys: Keys) -> None:
    hub = StreamHub(redis_url, keys)
    async with hub:
        xreads = hub.follower.xreads
        await asyncio.sleep(0.05)  # observe an idle period
        assert hub.follower.xreads == xreads == 0  # no subscribers: the loop waits, no traffic
        assert hub.follower.listener_client_id is None  # not even a connection
        assert hub.stats() == {"subscribers": 0, "streams": 0, "reading": 0}
    assert hub.closed
    with pytest.raises(RuntimeError):
        async with hub.subscribe("r1"):
            pass


async def test_an_error_reading_a_stream_is_a_lost_connection_unless_its_slot_is_moving(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    """An ``XREAD`` answered with an error that is not a slot mid-migration (``ASK``,
    ``TRYAGAIN``: tests/cluster/test_cluster_hub.py) is an outage: the hub reconnects and reads
    again, and its reader then gets every entry once."""
    hub = await make_hub(poll_ms=100)
    async with hub.subscribe("typed") as sub:
        assert await sub.get(timeout=0.01) is None
        first = await xadd(redis, keys, "typed", 1)
        assert [e.id for e in await take(sub, 1)] == [first]
        losses = hub.connection_losses
        async with redis.pipeline(transaction=True) as pipe:  # the key is no stream for a while
            pipe.rename(keys.events("typed"), keys.events("typed-aside"))
            pipe.set(keys.events("typed"), "not a stream")
            await pipe.execute()
        await eventually(lambda: hub.connection_losses > losses, within=10)  # WRONGTYPE
        async with redis.pipeline(transaction=True) as pipe:
            pipe.delete(keys.events("typed"))
            pipe.rename(keys.events("typed-aside"), keys.events("typed"))
            await pipe.execute()
        rest = await write_run(redis, keys, "typed", 1, start=2, end=True)
        assert [e.id for e in await drain(sub, within=15)] == rest


async def test_an_xread_reply_that_never_comes_is_a_lost_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """redis-py answers a read that timed out with None, which is also ``XREAD``'s "nothing
    new", and the late reply would then be taken for the next command's: the follower times
    its reads itself, and a reply that does not come raises (then it reconnects)."""
    monkeypatch.setattr(follower_module, "REPLY_GRACE_SECONDS", 0.05)

    class Silent:
        async def read_response(self, **_: Any) -> Any:
            await asyncio.Event().wait()

    follower = follower_module.Follower(
        aioredis.Redis(), count=10, poll_seconds=0.05, client_name="silent"
    )
    with pytest.raises(TimeoutError):
        await follower._reply(Silent())  # type: ignore[arg-type]


async def test_a_listener_that_never_answers_is_closed_and_counts_as_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pub/sub connection asks for its client id first; a reply that does not come fails
    the connect (the follower then reconnects with backoff) and the connection is closed, not
    left open beside the next one."""
    monkeypatch.setattr(follower_module, "REPLY_GRACE_SECONDS", 0.05)
    closed: list[bool] = []

    class Silent:
        async def connect(self) -> None:
            pass

        async def send_command(self, *_: Any) -> None:
            pass

        async def read_response(self, **_: Any) -> Any:
            await asyncio.Event().wait()

        async def disconnect(self, nowait: bool = False) -> None:
            closed.append(nowait)

    monkeypatch.setattr(follower_module, "dedicated_connection", lambda *_, **__: Silent())
    follower = follower_module.Follower(
        aioredis.Redis(), count=10, poll_seconds=0.05, client_name="silent"
    )
    with pytest.raises(TimeoutError):
        await follower._connect_listener()
    assert closed == [True]
