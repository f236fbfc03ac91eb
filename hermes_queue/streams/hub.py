"""One multiplexing stream reader per API process (ARCHITECTURE.md §3).

Every SSE client of this process is served from a single blocking ``XREAD BLOCK`` over all
followed run streams, on one dedicated connection; history is replayed with short ``XRANGE``
calls on the shared pool. So Redis connections stay constant however many clients watch.

Delivery contract of a subscription: exactly the entries with id > its cursor, in order, once.
A subscription attaches to the hub *before* it replays history, so entries the hub reads in the
meantime are buffered and later de-duplicated by id; a stream new to the hub is only added to
the XREAD once some subscriber has replayed it, starting at that subscriber's last id. A slow
consumer whose bounded buffer overflows is detached and later replays from its own last id, so
it costs neither memory nor the other subscribers' latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.config import Settings
from hermes_queue.events import RunEvent
from hermes_queue.keys import Keys
from hermes_queue.streams.reader import (
    ZERO_ID,
    Page,
    decode_flat,
    first_page,
    gap_event,
    id_key,
    normalize_cursor,
    queue_first_page,
    read_from_cursor,
    read_range,
)

log = logging.getLogger(__name__)

_BACKOFF_MIN = 0.1
_BACKOFF_MAX = 2.0
_REDIS_DOWN = (RedisConnectionError, RedisTimeoutError, OSError)


class _Stream:
    """One followed stream. ``cursor`` None = not yet replayed by anyone, so not in the XREAD."""

    __slots__ = ("cursor", "key", "packed_key", "run_id", "start", "subs")

    def __init__(self, key: str, run_id: str) -> None:
        self.key = key
        self.packed_key = _bulk(key.encode())  # as it goes into every XREAD
        self.run_id = run_id
        self.cursor: str | None = None  # last id the hub read
        self.start: str | None = None  # the cursor the hub started from
        self.subs: set[Subscription] = set()


def _bulk(value: bytes) -> bytes:
    """One RESP bulk string."""
    return b"$%d\r\n%s\r\n" % (len(value), value)


class Subscription:
    """One consumer's ordered, exactly-once view of a run's events (see module docstring)."""

    def __init__(
        self, hub: StreamHub, run_id: str, after: str | None, page: Page | None = None
    ) -> None:
        self._hub = hub
        self.run_id = run_id
        self._last = after  # last id handed out; None = fresh, nothing handed out yet
        self._last_key = None if after is None else id_key(after)
        self._queue: deque[RunEvent] = deque()  # live entries from the hub, bounded
        self._out: deque[RunEvent] = deque()  # ready to hand out (at most one page)
        self._wakeup = asyncio.Event()
        self._stream: _Stream | None = None  # set while attached to the hub
        self._need: str | None = None  # replay must reach this id before going live
        self._live = False
        self._first_page = True
        self._prefetched = page  # the first replay page, already read (StreamHub.prefetch)
        self._ending = False  # terminal event queued: no more reads
        self.finished = False  # terminal event delivered (or hub closed)
        self.overflows = 0  # times the hub detached us for being slow

    @property
    def last_id(self) -> str | None:
        return self._last

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> RunEvent:
        event = await self.get()
        if event is None:
            raise StopAsyncIteration
        return event

    async def get(self, timeout: float | None = None) -> RunEvent | None:  # noqa: ASYNC109
        """Next event, or None after ``timeout`` (send a keepalive) or once ``finished``.

        A timeout argument rather than ``asyncio.timeout`` because the SSE handler needs "quiet
        for N s" as a value (to send a keepalive), and it only ever cuts an idle wait short.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        backoff = _BACKOFF_MIN
        while True:
            self._wakeup.clear()
            if self._out:
                event = self._out.popleft()
                self.finished = event.terminal
                return event
            if self._ending or self._hub.closed:
                self.finished = True
                return None
            if not self._live:
                try:
                    await self._replay_page()
                except _REDIS_DOWN as exc:
                    # Redis is away: wait (within the caller's timeout) and retry the page.
                    log.warning("stream replay of run %s failed: %r", self.run_id, exc)
                    pause = backoff if deadline is None else min(backoff, deadline - loop.time())
                    if pause <= 0:
                        return None
                    await asyncio.sleep(pause)
                    backoff = min(backoff * 2, _BACKOFF_MAX)
                continue
            self._take_live()
            if self._out:
                continue
            if self._stream is None:  # detached for overflow and drained: replay from _last
                self._live = False
                continue
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return None
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation.
                async with asyncio.timeout(remaining):
                    await self._wakeup.wait()
            except TimeoutError:
                return None

    async def get_many(
        self,
        timeout: float | None = None,  # noqa: ASYNC109
        max_items: int = 256,
    ) -> list[RunEvent]:
        """The next event (waiting as :meth:`get` does) plus every event already at hand.

        Never waits for more than the first event and never reads Redis for the extra ones:
        it only takes what is buffered (the rest of a replay page, live entries the hub has
        fanned out). Same contract as :meth:`get` — in order, exactly once, nothing after the
        terminal event — so a batch is a contiguous run of the sequence. ``[]`` means what
        ``None`` means for :meth:`get`: the timeout passed, or the subscription is finished.
        """
        first = await self.get(timeout)
        if first is None:
            return []
        batch = [first]
        while len(batch) < max_items and not self.finished:
            event = self._pop_ready()
            if event is None:
                break
            batch.append(event)
        return batch

    def _pop_ready(self) -> RunEvent | None:
        """The next event that needs no waiting and no Redis read, else None."""
        if not self._out:
            if not self._live or self._ending or self._hub.closed:
                return None
            self._take_live()
            if not self._out:
                return None
        event = self._out.popleft()
        self.finished = event.terminal
        return event

    def _take_live(self) -> None:
        """Move buffered live entries to ``_out`` until one is new (dropping replayed ones)."""
        queue, out = self._queue, self._out
        while queue and not out:
            event = queue.popleft()
            if self._last_key is None or id_key(event.id) > self._last_key:
                self._hand_out(event)

    def _hand_out(self, event: RunEvent) -> None:
        if self._ending:
            return
        if self._last is None and event.seq != 1:  # fresh, but the run's start is gone
            self._out.append(gap_event(self.run_id, event.id, ZERO_ID))
        self._last = event.id
        self._last_key = id_key(event.id)
        self._out.append(event)
        if event.terminal:
            self._ending = True
            self._hub._detach(self)

    async def _replay_page(self) -> None:
        """Replay one XRANGE page after ``_last``; go live once replay meets the hub's cursor."""
        hub = self._hub
        if self._stream is None:
            # Attach first: whatever the hub reads from now on is buffered, so nothing written
            # between our last XRANGE and the switch to live can fall through.
            self._queue.clear()
            self._need = hub._attach(self).cursor
            self._first_page = True
        gap = None
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None:
            # Read before we attached: as good as reading it now, because going live below
            # still needs the replay to reach what the hub had read when we attached.
            gap, events = prefetched
        else:
            gap, events = await self._read_page()
        self._first_page = False
        if gap is not None:
            self._out.append(gap)
        for event in events:
            self._hand_out(event)
        stream = self._stream
        if len(events) >= hub.count or self._ending or stream is None:
            return  # more history, done, or detached meanwhile (next call re-attaches)
        last = self._last or ZERO_ID
        if self._need is None:
            if stream.start is None:
                hub._activate(stream, last)
            self._need = stream.start
        # The hub delivered us everything after _need; replay must have reached it.
        if self._need is not None and id_key(last) >= id_key(self._need):
            self._live = True

    async def _read_page(self) -> Page:
        hub = self._hub
        gap = None
        async with hub._replay_slots:
            if self._first_page and self._last is not None:
                gap, events = await read_from_cursor(
                    hub.redis, hub.keys, self.run_id, self._last, hub.count
                )
            else:
                events = await read_range(hub.redis, hub.keys, self.run_id, self._last, hub.count)
        return gap, events

    def _offer(self, event: RunEvent, limit: int) -> bool:
        """Buffer a live event; False (caller detaches us) when the buffer is full."""
        if len(self._queue) >= limit:
            return False
        self._queue.append(event)
        self._wakeup.set()
        return True


class StreamHub:
    """The process-wide reader: ``await start()``, ``subscribe()`` per client, ``aclose()``."""

    def __init__(
        self,
        redis: Redis | str,
        keys: Keys,
        *,
        queue_size: int = 1_000,
        block_ms: int = 5_000,
        count: int = 100,
        replay_concurrency: int = 8,
        client_name: str = "hermes-queue:hub",
    ) -> None:
        self._owns_redis = isinstance(redis, str)
        self.redis: Redis = Redis.from_url(redis) if isinstance(redis, str) else redis
        self.keys = keys
        self.queue_size = queue_size
        self.block_ms = block_ms
        # A page never exceeds a subscriber's buffer, so one XREAD cannot overflow it alone.
        self.count = max(1, min(count, queue_size))
        self.client_name = client_name
        # The XREAD is re-sent after every reply with a cursor per followed stream: pack it by
        # hand from pre-encoded pieces rather than through redis-py's generic pack_command.
        self._xread_head = b"".join(
            _bulk(str(arg).encode())
            for arg in ("XREAD", "COUNT", self.count, "BLOCK", block_ms, "STREAMS")
        )
        # Longer than the block so a dead peer is noticed, never cut a healthy XREAD.
        self._read_timeout = block_ms / 1000 + 10
        # Bounds pool connections used by replays when many clients (re)connect at once.
        self._replay_slots = asyncio.Semaphore(replay_concurrency)
        self._streams: dict[str, _Stream] = {}
        self._subs: set[Subscription] = set()
        self._changed = asyncio.Event()  # the XREAD set grew; wakes the idle loop
        self._version = 0  # bumped per stream added to the XREAD set
        self._inflight: tuple[int, int] | None = None  # (xread number, version) of the XREAD
        self._xreads = 0
        self._conn: AbstractConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._unblocker: asyncio.Task[None] | None = None
        self.reader_client_id: int | None = None
        self.unblocks_sent = 0
        self.closed = False

    @classmethod
    def from_settings(cls, settings: Settings, redis: Redis | None = None, **kw: Any) -> StreamHub:
        kw.setdefault("queue_size", settings.subscriber_queue_size)
        return cls(redis or settings.redis_url, Keys(settings.namespace), **kw)

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="stream-hub")

    async def aclose(self) -> None:
        self.closed = True
        for task in (self._task, self._unblocker):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._unblocker = None
        if self._conn is not None:
            await self._conn.disconnect(nowait=True)
            self._conn = None
        for sub in list(self._subs):
            sub._wakeup.set()
        if self._owns_redis:
            await self.redis.aclose()

    async def __aenter__(self) -> StreamHub:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- subscriptions ---------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def subscribe(
        self, run_id: str, after: str | None = None, *, page: Page | None = None
    ) -> AsyncIterator[Subscription]:
        """Events of ``run_id`` with id > ``after`` (None: from the first); raises ValueError
        on a malformed cursor so the API can answer 400. ``page``: the first replay page for
        exactly this ``after``, from :meth:`prefetch`, saving the subscription that read."""
        if self.closed:
            raise RuntimeError("StreamHub is closed")
        sub = Subscription(self, run_id, normalize_cursor(after), page)
        self._subs.add(sub)
        try:
            yield sub
        finally:
            self._subs.discard(sub)
            self._detach(sub)

    async def prefetch(
        self,
        run_id: str,
        after: str | None = None,
        before: Callable[[Pipeline], object] | None = None,
    ) -> tuple[list[Any], Page]:
        """One round trip for a new stream request: ``before``'s commands (queued on a
        pipeline, e.g. the run record lookup), then the first replay page after ``after``.

        Returns ``before``'s replies and the page to hand to :meth:`subscribe` with the same
        ``after``. Holds a replay slot, so a burst of new requests uses a bounded number of
        pool connections, as replays do.
        """
        cursor = normalize_cursor(after)
        async with self._replay_slots:
            pipe = self.redis.pipeline(transaction=False)
            if before is not None:
                before(pipe)
            own = len(pipe)
            queue_first_page(pipe, self.keys, run_id, cursor, self.count)
            replies = await pipe.execute()
        return replies[:own], first_page(run_id, cursor, replies[own:])

    def stats(self) -> dict[str, int]:
        """For metrics: open subscriptions, followed streams, streams in the XREAD."""
        live = sum(1 for s in self._streams.values() if s.cursor is not None)
        return {"subscribers": len(self._subs), "streams": len(self._streams), "reading": live}

    def _attach(self, sub: Subscription) -> _Stream:
        key = self.keys.events(sub.run_id)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = _Stream(key, sub.run_id)
        stream.subs.add(sub)
        sub._stream = stream
        return stream

    def _detach(self, sub: Subscription) -> None:
        stream, sub._stream = sub._stream, None
        if stream is None:
            return
        stream.subs.discard(sub)
        if not stream.subs and self._streams.get(stream.key) is stream:
            del self._streams[stream.key]  # the in-flight XREAD's result for it is ignored

    def _activate(self, stream: _Stream, cursor: str) -> None:
        """Add a replayed stream to the XREAD set, reading from ``cursor`` on."""
        stream.cursor = stream.start = cursor
        self._version += 1
        self._changed.set()
        if self._unblocker is None or self._unblocker.done():
            self._unblocker = asyncio.create_task(self._unblock(), name="stream-hub-unblock")

    # -- the reader ------------------------------------------------------------------------------
    async def _unblock(self) -> None:
        """Cut short a blocked XREAD that does not cover every stream (one task at a time).

        CLIENT UNBLOCK answers 0 when the XREAD has not reached the server yet, so retry briefly
        until the XREAD we target is unblocked or replaced by one that covers the new streams.
        """
        done_for = -1
        while not self.closed:
            inflight, reader = self._inflight, self.reader_client_id
            if inflight is None or inflight[1] >= self._version or reader is None:
                return  # the loop's next XREAD will include the new streams
            if inflight[0] != done_for:
                try:
                    self.unblocks_sent += 1
                    if await self.redis.client_unblock(reader):
                        done_for = inflight[0]
                except _REDIS_DOWN as exc:
                    log.warning("CLIENT UNBLOCK failed: %r", exc)
            await asyncio.sleep(0.002)

    async def _connect(self) -> AbstractConnection:
        if self._conn is None:
            pool = self.redis.connection_pool
            kwargs = dict(pool.connection_kwargs)
            kwargs.update(
                decode_responses=False,
                client_name=self.client_name,
                # No per-send timeout (redis-py wraps every send in wait_for, a task per XREAD);
                # reads pass _read_timeout instead.
                socket_timeout=None,
                retry_on_timeout=False,
                retry_on_error=[],
                retry=None,
                health_check_interval=0,
            )
            self._conn = pool.connection_class(**kwargs)
        if self.reader_client_id is None or not self._conn.is_connected:
            await self._conn.connect()  # type: ignore[no-untyped-call]
            await self._conn.send_command("CLIENT", "ID")
            self.reader_client_id = int(await self._conn.read_response(timeout=self._read_timeout))
        return self._conn

    async def _run(self) -> None:
        backoff = _BACKOFF_MIN
        while not self.closed:
            self._changed.clear()
            reading = [s for s in self._streams.values() if s.cursor is not None]
            if not reading:
                await self._changed.wait()  # idle: no spinning, no Redis traffic
                continue
            try:
                conn = await self._connect()
                self._xreads += 1
                self._inflight = (self._xreads, self._version)
                await conn.send_packed_command(self._pack_xread(reading), check_health=False)
                reply = await conn.read_response(timeout=self._read_timeout)
            except Exception as exc:  # never die: Redis restarts, CLIENT KILL, errors
                log.warning("stream hub XREAD failed, retrying in %.1fs: %r", backoff, exc)
                self.reader_client_id = None
                if self._conn is not None:
                    await self._conn.disconnect(nowait=True)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX)
                continue
            finally:
                self._inflight = None
            backoff = _BACKOFF_MIN
            self._dispatch({s.key: s for s in reading}, reply)

    def _pack_xread(self, reading: list[_Stream]) -> bytes:
        """``XREAD COUNT n BLOCK ms STREAMS <keys…> <cursors…>`` in RESP."""
        parts = [b"*%d\r\n" % (6 + 2 * len(reading)), self._xread_head]
        parts += [s.packed_key for s in reading]
        parts += [_bulk(s.cursor.encode()) for s in reading if s.cursor is not None]
        return b"".join(parts)

    def _dispatch(self, reading: dict[str, _Stream], reply: Any) -> None:
        if not reply:
            return  # timeout or CLIENT UNBLOCK
        for raw_key, entries in reply.items() if isinstance(reply, dict) else reply:
            key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
            stream = reading.get(key)
            if stream is None or self._streams.get(key) is not stream:
                continue  # dropped (or dropped and re-added) while the XREAD was in flight
            run_id, subs = stream.run_id, stream.subs
            for raw_id, flat in entries:
                try:
                    event = decode_flat(run_id, raw_id, flat)
                except (ValueError, TypeError):
                    # A malformed entry must not kill the reader for every run. Its subscribers
                    # are detached: their replay meets the entry again and raises to them alone.
                    log.exception("undecodable entry %r in %s", raw_id, key)
                    for sub in list(stream.subs):
                        self._detach(sub)
                        sub._wakeup.set()
                    break
                stream.cursor = event.id
                for sub in list(subs):
                    if not sub._offer(event, self.queue_size):
                        sub.overflows += 1
                        self._detach(sub)
                        sub._wakeup.set()


__all__ = ["StreamHub", "Subscription"]
