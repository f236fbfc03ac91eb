"""One multiplexing stream reader per API process (ARCHITECTURE.md §3).

Every SSE client of this process is served from one reader. The scripts that append to a run
stream also publish each entry on the channel named like the stream, and the hub is subscribed
to the channels of the streams it follows (one pub/sub connection): an entry that follows the
last one it has (by the run's ``seq``) is handed out from the message as it is. Anything else —
a gap, the first message after a stream is followed, a subscription just confirmed — becomes a
non-blocking ``XREAD`` of just that stream from the hub's cursor (one more connection), so the
stream, not the channel, stays the source of truth. History is replayed with short ``XRANGE``
calls on the shared pool. So Redis connections stay constant however many clients watch.

Why not one ``XREAD BLOCK`` over every followed stream, as this hub first did: Redis registers
and unregisters a blocked reader on every key it names, each time, and under a steady trickle
of events each call returns with one entry, so the cost per event grew with the number of
streams followed. At 1,000 runs in flight (~1,000 events/s) that ``XREAD`` alone took half a
core of Redis (docs/performance.md, cost growth). A published entry, or a read of one stream,
costs the same whatever else is followed.

A message can be missed only while the pub/sub connection is down or not yet subscribed: a
stream is read once its subscription is confirmed (so nothing written before it is missed),
every followed stream is read again after a reconnect, and every ``poll_ms`` all of them are
read anyway (a writer that does not publish, e.g. an older worker during a rolling upgrade, is
then late by at most that much, never lost).

Delivery contract of a subscription: exactly the entries with id > its cursor, in order, once.
A subscription attaches to the hub *before* it replays history, so entries the hub reads in the
meantime are buffered and later de-duplicated by id; a stream new to the hub is only followed
once some subscriber has replayed it, starting at that subscriber's last id. A slow consumer
whose bounded buffer overflows is detached and later replays from its own last id, so it costs
neither memory nor the other subscribers' latency.
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
        poll_ms: int = 1_000,
        count: int = 100,
        replay_concurrency: int = 8,
        client_name: str = "hermes-queue:hub",
    ) -> None:
        self._owns_redis = isinstance(redis, str)
        self.redis: Redis = Redis.from_url(redis) if isinstance(redis, str) else redis
        self.keys = keys
        self.queue_size = queue_size
        self.poll_seconds = poll_ms / 1000
        # A page never exceeds a subscriber's buffer, so one XREAD cannot overflow it alone.
        self.count = max(1, min(count, queue_size))
        self.client_name = client_name
        # An XREAD names only the streams to read, each with its cursor: pack it by hand
        # from pre-encoded pieces rather than through redis-py's generic pack_command.
        self._xread_head = b"".join(
            _bulk(str(arg).encode()) for arg in ("XREAD", "COUNT", self.count, "STREAMS")
        )
        # Bounds pool connections used by replays when many clients (re)connect at once.
        self._replay_slots = asyncio.Semaphore(replay_concurrency)
        self._streams: dict[str, _Stream] = {}
        self._subs: set[Subscription] = set()
        self._dirty: set[str] = set()  # followed streams to read from their cursor
        self._changed = asyncio.Event()  # a stream was followed, or the hub is closing
        self._subscribed: set[str] = set()  # channels SUBSCRIBE was sent for, this connection
        self._listener: AbstractConnection | None = None  # pub/sub: the published entries
        self._conn: AbstractConnection | None = None  # the XREADs
        self._task: asyncio.Task[None] | None = None
        self._syncer: asyncio.Task[None] | None = None
        self.xreads = 0
        self.listener_client_id: int | None = None
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
        for task in (self._task, self._syncer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._syncer = None
        for conn in (self._conn, self._listener):
            if conn is not None:
                await conn.disconnect(nowait=True)
        self._conn = self._listener = None
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
            self._dirty.discard(stream.key)
            if stream.key in self._subscribed:
                self._sync_subscriptions()

    def _activate(self, stream: _Stream, cursor: str, seq: int | None = None) -> None:
        """Follow a replayed stream from ``cursor`` (the entry numbered ``seq``, when known) on:
        subscribe to its channel; the confirmation makes the reader read it once (whatever was
        written meanwhile)."""
        stream.cursor, stream.seq = cursor, seq
        stream.start = cursor
        self._sync_subscriptions()
        self._changed.set()

    def _sync_subscriptions(self) -> None:
        """Bring the channels subscribed to in line with the streams followed (one task)."""
        if self._syncer is None or self._syncer.done():
            self._syncer = asyncio.create_task(self._sync(), name="stream-hub-subscribe")

    # -- the reader ------------------------------------------------------------------------------
    async def _sync(self) -> None:
        """Send SUBSCRIBE / UNSUBSCRIBE for what changed; the reader reads the confirmations.

        Sent from here, not the reader, because the reader is parked on the pub/sub socket
        waiting for the next message; a write does not disturb that read.
        """
        await asyncio.sleep(0)  # let a burst of new streams go out in one SUBSCRIBE
        while not self.closed:
            listener = self._listener
            if listener is None or not listener.is_connected:
                return  # the reader (re)connects and subscribes to everything followed
            wanted = {key for key, s in self._streams.items() if s.cursor is not None}
            added, dropped = wanted - self._subscribed, self._subscribed - wanted
            if not added and not dropped:
                return
            try:
                if added:
                    self._subscribed |= added
                    await listener.send_command("SUBSCRIBE", *added)
                if dropped:
                    self._subscribed -= dropped
                    await listener.send_command("UNSUBSCRIBE", *dropped)
            except _REDIS_DOWN as exc:  # the reader sees the same connection fail
                log.warning("stream hub SUBSCRIBE failed: %r", exc)
                return

    async def _connect_listener(self) -> AbstractConnection:
        listener = dedicated_connection(
            self.redis, f"{self.client_name}:entries", decode_responses=False
        )
        await listener.connect()  # type: ignore[no-untyped-call]
        await listener.send_command("CLIENT", "ID")
        self.listener_client_id = int(await listener.read_response(timeout=self.poll_seconds + 10))
        self._subscribed = set()
        self._listener = listener
        return listener

    async def _run(self) -> None:
        backoff = _BACKOFF_MIN
        loop = asyncio.get_running_loop()
        next_poll = loop.time() + self.poll_seconds
        while not self.closed:
            if loop.time() >= next_poll:  # busy or not, everything is read once per poll
                next_poll = loop.time() + self.poll_seconds
                self._hear(None)
            try:
                if self._listener is None:
                    if not any(s.cursor is not None for s in self._streams.values()):
                        self._changed.clear()
                        await self._changed.wait()  # idle: no connection, no Redis traffic
                        continue
                    await self._connect_listener()
                    self._sync_subscriptions()
                    # Nothing published while disconnected was heard: read everything.
                    self._dirty.update(k for k, s in self._streams.items() if s.cursor is not None)
                elif not self._dirty:
                    wait = max(0.0, next_poll - loop.time())
                    self._hear(await self._listener.read_response(timeout=wait))
                while self._dirty and not self.closed:
                    await self._read_dirty()
                backoff = _BACKOFF_MIN
            except Exception as exc:  # never die: Redis restarts, CLIENT KILL, errors
                log.warning("stream hub read failed, retrying in %.1fs: %r", backoff, exc)
                for conn in (self._listener, self._conn):
                    if conn is not None:
                        await conn.disconnect(nowait=True)
                self._listener = self._conn = None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX)

    def _hear(self, message: Any) -> None:
        """Mark what a pub/sub reply concerns for reading; None (the poll): every stream."""
        if message is None:
            self._dirty.update(k for k, s in self._streams.items() if s.cursor is not None)
            return
        kind, channel = message[0], message[1]
        if kind not in (b"message", b"subscribe"):
            return
        key = channel.decode()
        stream = self._streams.get(key)
        if stream is None or stream.cursor is None:
            return
        if kind == b"message" and key not in self._dirty and stream.seq is not None:
            # The entry itself: hand it out if it is the next one, skip it if already read.
            parts = message[2].split(b"\0", 6)
            if len(parts) == 7 and parts[2].isdigit():
                seq = int(parts[2])
                if seq <= stream.seq:
                    return
                if seq == stream.seq + 1:
                    flat = [b"t", parts[1], b"s", parts[2], b"a", parts[3]]
                    flat += [b"ts", parts[4], b"sid", parts[5], b"d", parts[6]]
                    self._dispatch({key: stream}, [(channel, [(parts[0], flat)])])
                    return
        # A gap, an entry we cannot place, or a subscription now in effect: read the stream.
        self._dirty.add(key)

    async def _read_dirty(self) -> None:
        """One non-blocking XREAD of the streams marked; a stream that filled its page stays
        marked (there may be more)."""
        reading = {
            key: stream
            for key in self._dirty
            if (stream := self._streams.get(key)) is not None and stream.cursor is not None
        }
        self._dirty.clear()
        if not reading:
            return
        if self._conn is None or not self._conn.is_connected:
            self._conn = dedicated_connection(self.redis, self.client_name, decode_responses=False)
            await self._conn.connect()  # type: ignore[no-untyped-call]
        self.xreads += 1
        try:
            await self._conn.send_packed_command(self._pack_xread(reading), check_health=False)
            reply = await self._conn.read_response(timeout=self.poll_seconds + 10)
        except BaseException:
            self._dirty.update(reading)  # read them again once reconnected
            raise
        for key, count in self._dispatch(reading, reply).items():
            if count >= self.count:
                self._dirty.add(key)

    def _pack_xread(self, reading: dict[str, _Stream]) -> bytes:
        """``XREAD COUNT n STREAMS <keys…> <cursors…>`` in RESP."""
        streams = list(reading.values())
        parts = [b"*%d\r\n" % (4 + 2 * len(streams)), self._xread_head]
        parts += [s.packed_key for s in streams]
        parts += [_bulk(s.cursor.encode()) for s in streams if s.cursor is not None]
        return b"".join(parts)

    def _dispatch(self, reading: dict[str, _Stream], reply: Any) -> dict[str, int]:
        """Hand the entries of an XREAD reply to the subscribers; entries read per stream."""
        counts: dict[str, int] = {}
        if not reply:
            return counts  # nothing new
        for raw_key, entries in reply.items() if isinstance(reply, dict) else reply:
            key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
            stream = reading.get(key)
            if stream is None or self._streams.get(key) is not stream:
                continue  # dropped (or dropped and re-added) while the XREAD was in flight
            run_id, subs = stream.run_id, stream.subs
            counts[key] = len(entries)
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
                stream.cursor, stream.seq = event.id, event.seq
                for sub in list(subs):
                    if not sub._offer(event, self.queue_size):
                        sub.overflows += 1
                        self._detach(sub)
                        sub._wakeup.set()
        return counts


__all__ = ["StreamHub", "Subscription"]
