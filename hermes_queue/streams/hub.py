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
from collections.abc import AsyncIterator, Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import AbstractConnection

from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.redis_pipeline import dedicated_connection
from hermes_queue.streams.reader import (
    Page,
    decode_flat,
    first_page,
    normalize_cursor,
    queue_first_page,
)
from hermes_queue.streams.subscription import (
    _BACKOFF_MAX,
    _BACKOFF_MIN,
    _REDIS_DOWN,
    Subscription,
    _bulk,
    _Stream,
)

log = logging.getLogger(__name__)


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
            # No per-send timeout (redis-py wraps every send in wait_for, a task per XREAD);
            # reads pass _read_timeout instead.
            self._conn = dedicated_connection(self.redis, self.client_name, decode_responses=False)
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
