"""One multiplexing stream reader per API process (docs/architecture.md).

Every SSE client of this process is served from one hub, so Redis connections stay constant
however many clients watch: its :class:`Follower` (``follower.py``) reads every stream that has
subscribers on two dedicated connections (entries as the run scripts publish them, ``XREAD``
only to fill gaps), and history is replayed with short ``XRANGE`` calls on the shared pool, a
bounded number at a time.

Delivery contract of a subscription: exactly the entries with id > its cursor, in order, once.
A subscription attaches to the hub *before* it replays history, so entries the hub reads in the
meantime are buffered in its tap and later de-duplicated by id; a stream new to the hub is only
followed once some subscriber has replayed it, starting at that subscriber's last id. A slow
consumer whose bounded buffer overflows is detached and later replays from its own last id, so
it costs neither memory nor the other subscribers' latency.

Who owns what: the hub owns which subscribers are attached to which stream, their taps (the
buffers) and the fan-out; the follower owns the cursors and connections; a ``Subscription``
(``subscription.py``) owns one consumer's replay and hand-over, and sees the hub only through
the ``Hub`` and ``Tap`` protocols declared there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from hermes_queue.events import RunEvent
from hermes_queue.keys import Keys
from hermes_queue.redisio.connect import connect_url
from hermes_queue.streams.follower import Follower
from hermes_queue.streams.presence import ReaderPresence
from hermes_queue.streams.reader import (
    Page,
    first_page,
    id_key,
    normalize_cursor,
    page_tip,
    queue_first_page,
    read_from_cursor,
    read_range,
)
from hermes_queue.streams.sharded import ShardedFollower
from hermes_queue.streams.subscription import Subscription


class _Stream:
    """A run stream with taps attached: the follower's sink for it once it is followed."""

    __slots__ = ("key", "last", "run_id", "start", "taps")

    def __init__(self, key: str, run_id: str) -> None:
        self.key = key
        self.run_id = run_id
        self.start: str | None = None  # the cursor it was followed from; None: not followed yet
        self.last: str | None = None  # the last entry handed to the taps (from ``start`` on)
        self.taps: set[_Tap] = set()

    def deliver(self, event: RunEvent) -> None:
        self.last = event.id
        for tap in list(self.taps):
            tap._offer(event)

    def undecodable(self) -> None:
        # Every tap is detached: each replay meets the entry again and raises to its
        # subscriber alone, and the stream, with nobody attached, is no longer followed.
        for tap in list(self.taps):
            tap._drop()


class _Tap:
    """One subscriber's attachment to a stream (the ``Tap`` protocol of subscription.py)."""

    __slots__ = ("_events", "_hub", "_limit", "_start", "_stream", "_wake", "overflowed")

    def __init__(self, hub: StreamHub, stream: _Stream, wake: Callable[[], None]) -> None:
        self._hub = hub
        self._stream: _Stream | None = stream  # None once detached
        self._start = stream.last  # we get every entry after it; None: not followed yet
        self._events: deque[RunEvent] = deque()
        self._limit = hub.queue_size
        self._wake = wake
        self.overflowed = False

    @property
    def attached(self) -> bool:
        return self._stream is not None

    def __len__(self) -> int:
        return len(self._events)

    def pop(self) -> RunEvent | None:
        return self._events.popleft() if self._events else None

    def caught_up(self, last: str, seq: int | None) -> bool:
        stream = self._stream
        if self._start is None and stream is not None:
            if stream.start is None:
                self._hub._follow(stream, last, seq)
            self._start = stream.start
        # We have everything after _start; a replay that reached it leaves no hole.
        return self._start is not None and id_key(last) >= id_key(self._start)

    def detach(self) -> None:
        self._hub._detach(self)

    def _offer(self, event: RunEvent) -> None:
        if len(self._events) >= self._limit:
            self.overflowed = True
            self._drop()
            return
        self._events.append(event)
        self._wake()

    def _drop(self) -> None:
        """Detached by the hub: wake the subscriber, which drains what is here and replays."""
        self.detach()
        self._wake()


class StreamHub:
    """The process-wide reader: ``await start()``, ``subscribe()`` per client, ``aclose()``."""

    def __init__(
        self,
        redis: Redis | str,
        keys: Keys,
        *,
        queue_size: int = 1_000,
        poll_ms: int = 1_000,
        count: int = 100,
        replay_concurrency: int = 8,
        client_name: str = "hermes-queue:hub",
    ) -> None:
        self._owns_redis = isinstance(redis, str)
        self.redis: Redis = connect_url(redis) if isinstance(redis, str) else redis
        self.keys = keys
        self.queue_size = queue_size
        # A page never exceeds a subscriber's buffer, so one XREAD cannot overflow it alone.
        self.page_size = max(1, min(count, queue_size))
        poll_seconds = poll_ms / 1000
        self.follower: Follower | ShardedFollower
        if keys.cluster:  # a follower per node, for the shards it serves
            self.follower = ShardedFollower(
                self.redis,
                keys,
                count=self.page_size,
                poll_seconds=poll_seconds,
                client_name=client_name,
            )
        else:
            self.follower = Follower(
                self.redis, count=self.page_size, poll_seconds=poll_seconds, client_name=client_name
            )
        # Bounds pool connections used by replays when many clients (re)connect at once.
        self._replay_slots = asyncio.Semaphore(replay_concurrency)
        # Which runs this process's clients read, as the run scripts see it (presence.py).
        self.presence = ReaderPresence(self.redis, keys)
        self._streams: dict[str, _Stream] = {}  # by key: the streams with taps attached
        self._subscribers = 0
        self.closed = False

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.follower.start()
        self.presence.start()

    async def aclose(self) -> None:
        self.closed = True
        await self.presence.aclose()
        await self.follower.aclose()
        for stream in list(self._streams.values()):
            for tap in stream.taps:
                tap._wake()
        if self._owns_redis:
            await self.redis.aclose()

    async def __aenter__(self) -> StreamHub:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- for the API -----------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def subscribe(
        self,
        run_id: str,
        after: str | None = None,
        *,
        page: Page | None = None,
        fresh: bool = False,
        reader_written: bool = False,
    ) -> AsyncIterator[Subscription]:
        """Events of ``run_id`` with id > ``after`` (None: from the first); raises ValueError
        on a malformed cursor so the API can answer 400. ``page``: the first replay page for
        exactly this ``after``, from :meth:`prefetch`, saving the subscription that read.
        ``fresh``: the run was created just now by the caller's request, so its history is a
        few entries at most, which the follower reads from the stream's start: no replay read
        (an empty first page). ``reader_written``: this process's reader entry for the run was
        written by the script that created it (``ReaderPresence.enter``)."""
        if self.closed:
            raise RuntimeError("StreamHub is closed")
        if fresh and after is None:
            page = (None, [])
        sub = Subscription(self, run_id, normalize_cursor(after), page)
        self._subscribers += 1
        self.presence.enter(run_id, written=reader_written)
        try:
            yield sub
        finally:
            self._subscribers -= 1
            self.presence.leave(run_id, ended=sub.ended)
            sub.close()

    async def prefetch(
        self,
        run_id: str,
        after: str | None = None,
        before: Callable[[Pipeline], object] | None = None,
    ) -> tuple[list[Any], Page, str]:
        """One round trip for a new stream request: ``before``'s commands (queued on a
        pipeline, e.g. the run record lookup), then the first replay page after ``after``.

        Returns ``before``'s replies, the page to hand to :meth:`subscribe` with the same
        ``after``, and its :func:`~hermes_queue.streams.reader.page_tip` (where the stream
        ended as seen from ``after``). Holds a replay slot, so a burst of new requests uses a
        bounded number of pool connections, as replays do.
        """
        cursor = normalize_cursor(after)
        async with self._replay_slots:
            pipe = self.redis.pipeline(transaction=False)
            if before is not None:
                before(pipe)
            own = len(pipe)
            queue_first_page(pipe, self.keys, run_id, cursor, self.page_size)
            replies = await pipe.execute()
        page = replies[own:]
        return replies[:own], first_page(run_id, cursor, page), page_tip(page)

    @property
    def connection_losses(self) -> int:
        """How many times the hub lost its Redis connections: a change means Redis may have lost
        data meanwhile (a restart without persistence, a failover)."""
        return self.follower.losses

    def stats(self) -> dict[str, int]:
        """For metrics: open subscriptions, streams with subscribers, streams followed."""
        return {
            "subscribers": self._subscribers,
            "streams": len(self._streams),
            "reading": self.follower.following,
        }

    # -- for subscriptions (the Hub protocol of subscription.py) ---------------------------------
    def attach(self, run_id: str, wake: Callable[[], None]) -> _Tap:
        key = self.keys.events(run_id)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = _Stream(key, run_id)
        tap = _Tap(self, stream, wake)
        stream.taps.add(tap)
        return tap

    async def read_history(self, run_id: str, after: str | None, *, first: bool) -> Page:
        async with self._replay_slots:
            if first and after is not None:
                return await read_from_cursor(self.redis, self.keys, run_id, after, self.page_size)
            return None, await read_range(self.redis, self.keys, run_id, after, self.page_size)

    def _follow(self, stream: _Stream, cursor: str, seq: int | None) -> None:
        stream.start = stream.last = cursor
        self.follower.follow(stream.key, stream.run_id, cursor, seq, stream)

    def _detach(self, tap: _Tap) -> None:
        stream, tap._stream = tap._stream, None
        if stream is None:
            return
        stream.taps.discard(tap)
        if not stream.taps and self._streams.get(stream.key) is stream:
            del self._streams[stream.key]
            if stream.start is not None:
                self.follower.unfollow(stream.key)


__all__ = ["StreamHub", "Subscription"]
