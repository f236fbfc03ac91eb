"""Batched delivery: ``Subscription.get_many``, ``StreamHub.prefetch``, the SSE pump's writes,
and the cheaper decoding/encoding paths (which must match the generic ones exactly)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import redis.asyncio as aioredis

from hermes_queue.api import feed
from hermes_queue.api.hermes.render import SessionStream, render_runs
from hermes_queue.api.http import sse
from hermes_queue.events import EventType, RunEvent, parse_stream_id
from hermes_queue.keys import Keys
from hermes_queue.streams.codec import decode_entry, decode_flat, published, split_published
from hermes_queue.streams.hub import StreamHub, Subscription
from hermes_queue.streams.reader import id_key, read_range
from tests.streams.conftest import MakeHub
from tests.streams.test_hub import write_run, xadd
from tests.support.polling import eventually


async def batches_until_end(sub: Subscription, max_items: int = 256) -> list[list[RunEvent]]:
    async def collect() -> list[list[RunEvent]]:
        out: list[list[RunEvent]] = []
        while True:
            batch = await sub.get_many(max_items=max_items)
            if not batch:
                return out
            out.append(batch)

    return await asyncio.wait_for(collect(), 10)


async def wait_buffered(sub: Subscription, n: int) -> None:
    """Observing the hub's buffer: no event says it grew."""
    await eventually(lambda: sub.buffered >= n, within=5, every=0.005, what=f"{n} buffered")


async def test_get_many_drains_what_is_buffered_in_order_once(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    hub = await make_hub()
    async with hub.subscribe("r1") as sub:
        assert await sub.get_many(timeout=0.01) == []  # replayed (nothing), live, quiet
        ids = await write_run(redis, keys, "r1", 30)
        await wait_buffered(sub, 30)
        batch = await sub.get_many(timeout=1, max_items=1000)
        assert [e.id for e in batch] == ids  # everything at hand, one batch
        assert await sub.get_many(timeout=0.01) == [] and not sub.finished
        ids += await write_run(redis, keys, "r1", 4, start=31, end=True)
        await xadd(redis, keys, "r1", 99)  # after the end: never delivered
        rest = [e for b in await batches_until_end(sub) for e in b]
    assert [e.id for e in batch + rest] == ids
    assert rest[-1].terminal and sub.finished


async def test_get_many_respects_max_items_and_stops_at_the_end(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    hub = await make_hub(count=7)  # replay pages of 7: batches never wait for the next page
    ids = await write_run(redis, keys, "r1", 20, end=True)
    async with hub.subscribe("r1") as sub:
        batches = await batches_until_end(sub, max_items=5)
    assert all(1 <= len(b) <= 5 for b in batches)
    assert [e.id for b in batches for e in b] == ids
    assert batches[-1][-1].terminal


async def test_get_many_mixed_with_get_and_overlapping_replay(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    """Subscribers joining mid-stream, reading in batches of random sizes, all get the exact
    sequence (the replay/live hand-over de-duplicates inside a batch too)."""
    hub = await make_hub(count=5)
    await write_run(redis, keys, "r1", 12)

    async def consume(size: int) -> list[str]:
        got: list[str] = []
        async with hub.subscribe("r1") as sub:
            while True:
                if size == 1:
                    event = await sub.get()
                    batch = [] if event is None else [event]
                else:
                    batch = await sub.get_many(max_items=size)
                if not batch:
                    return got
                got += [e.id for e in batch]

    tasks = []
    seq = 12
    for i in range(20):
        tasks.append(asyncio.create_task(consume(1 + i % 7)))
        for _ in range(2):
            seq += 1
            await xadd(redis, keys, "r1", seq)
    await xadd(redis, keys, "r1", seq + 1, EventType.RUN_COMPLETED)
    results = await asyncio.wait_for(asyncio.gather(*tasks), 10)
    expected = [e.id for e in await read_range(redis, keys, "r1", None, 1000)]
    assert all(result == expected for result in results)


async def test_slow_batch_reader_is_detached_then_replays(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    hub = await make_hub(queue_size=10)
    async with hub.subscribe("r1") as sub:
        assert await sub.get_many(timeout=0.01) == []
        ids = [await xadd(redis, keys, "r1", seq) for seq in range(1, 41)]
        ids.append(await xadd(redis, keys, "r1", 41, EventType.RUN_CANCELLED))
        batches = await batches_until_end(sub)
    assert sub.overflows >= 1
    assert [e.id for b in batches for e in b] == ids


async def test_prefetch_matches_the_subscription_own_replay(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    hub = await make_hub(count=4)
    ids = await write_run(redis, keys, "r1", 10, end=True)
    await redis.hset(keys.run("r1"), mapping={"status": "completed"})
    for after in (None, "0-0", ids[2], ids[-2]):
        replies, page, _tip = await hub.prefetch(
            "r1", after, lambda pipe: pipe.hgetall(keys.run("r1"))
        )
        assert replies == [{b"status": b"completed"}]
        async with hub.subscribe("r1", after, page=page) as sub:
            with_page = [e.id for b in await batches_until_end(sub) for e in b]
        async with hub.subscribe("r1", after) as sub:
            without = [e.id async for e in sub]
        start = 0 if after in (None, "0-0") else ids.index(after) + 1
        assert with_page == without == ids[start:]


async def test_prefetched_page_behind_the_hub_still_catches_up(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    """A page read before attaching, older than where the hub already tails: the subscription
    must replay the difference, not go live with a hole."""
    hub = await make_hub()
    ids = await write_run(redis, keys, "r1", 3)
    _replies, stale, _tip = await hub.prefetch("r1")
    async with hub.subscribe("r1") as tail:
        assert await tail.get_many(timeout=0.01) != []  # tail replays 1..3 and goes live
        ids += await write_run(redis, keys, "r1", 3, start=4)
        await asyncio.wait_for(tail.get_many(), 5)
        async with hub.subscribe("r1", page=stale) as late:
            ids += await write_run(redis, keys, "r1", 1, start=7, end=True)
            got = [e.id for b in await batches_until_end(late) for e in b]
    assert got == ids


async def test_prefetch_reports_a_trimmed_cursor_as_a_gap(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    hub = await make_hub()
    ids = await write_run(redis, keys, "r1", 10, end=True)
    await redis.xtrim(keys.events("r1"), maxlen=6, approximate=False)
    _replies, page, _tip = await hub.prefetch("r1", ids[1])
    async with hub.subscribe("r1", ids[1], page=page) as sub:
        events = [e for b in await batches_until_end(sub) for e in b]
    assert events[0].type == EventType.STREAM_GAP
    assert events[0].data == {"first_available_id": ids[5], "missed_from": ids[1]}
    assert [e.id for e in events[1:]] == ids[5:]


async def test_the_page_tip_checks_its_cursor_as_the_stream_head_does(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    """The SSE open checks a cursor against the page it read from that cursor instead of an
    XREVRANGE of the head: same verdict (at the end, or ahead: a 400) for every kind of cursor,
    with pages full and short, entries deleted at the end and in the middle, no stream at all."""
    hub = await make_hub(count=4)

    def verdict(cursor: str | None, newest: str) -> str:
        try:
            return "end" if sse.cursor_at_end(cursor, newest) else "behind"
        except sse.ApiError:
            return "ahead"

    async def compare(run_id: str, cursors: list[str | None]) -> None:
        rows = await redis.xrevrange(keys.events(run_id), count=1)
        head = rows[0][0].decode() if rows else "0-0"
        for cursor in cursors:
            _replies, _page, tip = await hub.prefetch(run_id, cursor)
            assert verdict(cursor, tip) == verdict(cursor, head), (run_id, cursor)

    await compare("none", [None, "0-0", "5-0"])
    ids = await write_run(redis, keys, "r1", 9)
    await redis.xdel(keys.events("r1"), ids[4], ids[8])  # a hole in the middle, and at the end
    ms, seq = parse_stream_id(ids[-1]) or (0, 0)
    past = [f"{ms}-{seq + 1}", f"{ms + 1}-0"]
    await compare("r1", [None, "0-0", *ids, *past, "1-0"])
    await redis.xtrim(keys.events("r1"), maxlen=0, approximate=False)  # empty, but exists
    await compare("r1", [None, "0-0", ids[0], ids[-1]])


# -- the SSE pump --------------------------------------------------------------------------------
class RecordingResponse:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.eof: bytes | None = None

    async def write(self, data: bytes) -> None:
        assert self.eof is None
        self.writes.append(bytes(data))

    async def write_eof(self, data: bytes = b"") -> None:
        assert self.eof is None
        self.eof = bytes(data)


# What pump asks of the request: its connection (none here, so nothing watches it close).
NO_CONNECTION = SimpleNamespace(protocol=None)


def feed_of(hub: StreamHub, keepalive: float = 10.0) -> feed.RunFeed:
    return feed.RunFeed(hub, hub.redis, hub.keys, keepalive)


def frames_of(event: RunEvent, render: sse.Renderer) -> bytes:
    """What the unbatched pump writes for one event: each frame with its own id line."""
    return b"".join(sse.encode_frame(name, payload, fid) for name, payload, fid in render(event))


def runs_renderer() -> sse.Renderer:
    return render_runs


@pytest.mark.parametrize("renderer", [runs_renderer, SessionStream])
async def test_pump_writes_whole_frames_in_batches(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub, renderer: Callable[[], sse.Renderer]
) -> None:
    hub = await make_hub()
    render, reference = renderer(), renderer()  # the session stream numbers its frames
    await write_run(redis, keys, "r1", 25, end=True)
    expected_events = await read_range(redis, keys, "r1", None, 1000)
    response = RecordingResponse()
    done = await feed_of(hub).pump(
        NO_CONNECTION,  # type: ignore[arg-type]
        response,  # type: ignore[arg-type]
        "r1",
        None,
        render,
        end=sse.STREAM_CLOSED,
    )
    assert done
    assert len(response.writes) < len(expected_events)  # batched: fewer writes than events
    assert response.eof is not None and response.eof.endswith(sse.STREAM_CLOSED)
    body = b"".join(response.writes) + response.eof
    # Byte-identical to rendering every event on its own, then ": stream closed".
    rendered = [frames_of(e, reference) for e in expected_events]
    assert body == b"".join(rendered) + sse.STREAM_CLOSED
    for chunk in [*response.writes, response.eof[: -len(sse.STREAM_CLOSED)]]:
        assert chunk.endswith(b"\n\n")  # a write never ends inside a frame...
        for frame in chunk[:-2].split(b"\n\n"):  # ...nor starts inside one
            assert frame.startswith((b"id: ", b"event: ", b"data: "))
    # The terminal event's frames (with the session dialect's ``done``) share the final write.
    assert rendered[-1] in response.eof


async def test_pump_live_batches_and_keepalive(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    hub = await make_hub()
    response = RecordingResponse()
    pump = asyncio.create_task(
        feed_of(hub, keepalive=0.05).pump(NO_CONNECTION, response, "r1", None, render_runs)  # type: ignore[arg-type]
    )
    await asyncio.sleep(0.15)
    assert sse.KEEPALIVE in response.writes  # quiet: keepalives, nothing else
    ids = await write_run(redis, keys, "r1", 10, end=True)
    assert await asyncio.wait_for(pump, 5) is True
    assert response.eof is None  # no ``end``: the caller finishes the response
    frames = b"".join(w for w in response.writes if w != sse.KEEPALIVE)
    assert [line[4:].decode() for line in frames.split(b"\n") if line.startswith(b"id: ")] == ids


async def test_pump_returns_when_the_hub_closes(
    redis: aioredis.Redis, keys: Keys, make_hub: MakeHub
) -> None:
    hub = await make_hub()
    response = RecordingResponse()
    pump = asyncio.create_task(
        feed_of(hub, keepalive=0.05).pump(NO_CONNECTION, response, "r1", None, render_runs)  # type: ignore[arg-type]
    )
    await asyncio.sleep(0.1)
    await hub.aclose()
    assert await asyncio.wait_for(pump, 2) is False  # no busy loop of keepalives


# -- encoding and decoding fast paths -------------------------------------------------------------
def old_encode_frame(name: str | None, payload: dict[str, Any] | str, event_id: str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    lines = []
    if event_id:
        lines.append(f"id: {event_id}")
    if name:
        lines.append(f"event: {name}")
    lines.append(f"data: {data}")
    return ("\n".join(lines) + "\n\n").encode()


@pytest.mark.parametrize("name", [None, "", "assistant.delta"])
@pytest.mark.parametrize("event_id", ["", "1712345678901-0"])
@pytest.mark.parametrize(
    "payload", [{"delta": 'héllo ✓ "q"\n', "n": 1.5, "x": None, "l": [1, {}]}, "raw text", {}]
)
def test_encode_frame_is_byte_identical(
    name: str | None, event_id: str, payload: dict[str, Any] | str
) -> None:
    assert sse.encode_frame(name, payload, event_id) == old_encode_frame(name, payload, event_id)


def test_rendered_once_per_event_object() -> None:
    calls: list[RunEvent] = []

    def render(event: RunEvent) -> list[sse.Frame]:
        calls.append(event)
        return list(render_runs(event))

    sse.shared(render)
    a = RunEvent(type="message.delta", run_id="r", data={"delta": "x"}, id="1-0")
    b = RunEvent(type="message.delta", run_id="r", data={"delta": "x"}, id="1-0")  # equal, not same
    first = sse.event_bytes(a, render)
    assert sse.event_bytes(a, render) == first and len(calls) == 1
    assert sse.event_bytes(b, render) == first and len(calls) == 2
    assert first == frames_of(a, render_runs)


def test_a_renderer_with_state_renders_every_time() -> None:
    """A per-connection renderer (it numbers frames) is never served from the shared cache."""
    stream = SessionStream()
    a = RunEvent(type="message.delta", run_id="run_r", data={"delta": "x"}, id="1-0", seq=1)
    first, second = sse.event_bytes(a, stream), sse.event_bytes(a, stream)
    assert b'"seq": 1' in first and b'"seq": 2' in second


def test_every_form_of_an_entry_decodes_alike() -> None:
    """The fast path (bytes keys), the general one (str keys), a raw XREAD row and the
    published message give the same event."""
    flat = [b"t", b"message.delta", b"s", b"7", b"a", b"2", b"ts", b"1712345678.25", b"sid"]
    flat += [b"sess", b"d", json.dumps({"delta": "é"}).encode()]
    fields = dict(zip(flat[::2], flat[1::2], strict=True))
    as_str = {k.decode(): v.decode() for k, v in fields.items()}
    reference = decode_entry("r", "5-1", as_str)
    assert reference == RunEvent(
        "message.delta", "r", "sess", 7, 1712345678.25, 2, {"delta": "é"}, id="5-1"
    )
    assert decode_entry("r", b"5-1", fields) == reference
    assert decode_flat("r", b"5-1", flat) == reference
    message = split_published(published("5-1", as_str).encode())
    assert message is not None and message[:2] == (b"5-1", 7)
    assert decode_flat("r", message[0], message[2]) == reference
    assert split_published(b"not\0an entry") is None
    sparse = {b"t": b"run.cancelled"}
    assert decode_entry("r", "5-2", sparse) == decode_entry("r", "5-2", {"t": "run.cancelled"})
    assert decode_flat("r", "5-3", []) == RunEvent(type="", run_id="r", id="5-3")
    with pytest.raises(ValueError):
        decode_entry("r", "5-4", {b"t": b"message.delta", b"d": b"{not json"})
    with pytest.raises(ValueError):
        decode_flat("r", "5-5", [b"t"])


@pytest.mark.parametrize("raw", ["0-0", "1712345678901-3", "18446744073709551615-0", "42"])
def test_id_key_matches_parse(raw: str) -> None:
    assert id_key(raw) == parse_stream_id(raw)


@pytest.mark.parametrize("raw", ["nope", "1-x", "-1", ""])
def test_id_key_rejects_non_ids(raw: str) -> None:
    with pytest.raises(ValueError):
        id_key(raw)
