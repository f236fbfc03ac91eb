"""The hub's Redis side: keeps the streams it follows read to their end, on two connections.

The scripts that append to a run stream also publish each entry on the channel named like the
stream, and the follower is subscribed to the channels of the streams it follows (one pub/sub
connection): an entry that follows the last one it has (by the run's ``seq``) is handed on from
the message as it is. Anything else — a gap, the first message after a stream is followed, a
subscription just confirmed — becomes a non-blocking ``XREAD`` of just that stream from the
follower's cursor (one more connection), so the stream, not the channel, stays the source of
truth. So Redis connections stay constant however many streams are followed.

Per stream followed that is one SUBSCRIBE and the one XREAD its confirmation prompts. That read
cannot go: a stream is followed once a subscriber's replay has read it to its end, and only
then subscribed to, so whatever was written between that replay read and the subscription
taking effect was neither read nor heard, and nothing but a read of the stream can tell (the
next message's ``seq`` would reveal a gap, but a stream may stay quiet, e.g. after its
terminal event). Replies already received are all heard before any read, so a burst of
confirmations (one SUBSCRIBE of many channels) or of messages costs one XREAD, not one per
stream. A channel nobody follows any more is unsubscribed at the next poll, together with the
others dropped meanwhile: one UNSUBSCRIBE a poll rather than one per stream.

Why not one ``XREAD BLOCK`` over every followed stream, as the hub first did: Redis registers
and unregisters a blocked reader on every key it names, each time, and under a steady trickle
of events each call returns with one entry, so the cost per event grew with the number of
streams followed. At 1,000 runs in flight (~1,000 events/s) that ``XREAD`` alone took half a
core of Redis (docs/performance.md, cost growth). A published entry, or a read of one stream,
costs the same whatever else is followed.

A message can be missed only while the pub/sub connection is down or not yet subscribed: a
stream is read once its subscription is confirmed (so nothing written before it is missed),
every followed stream is read again after a reconnect, and every ``poll_seconds`` all of them
are read anyway (a writer that does not publish, e.g. an older worker during a rolling upgrade,
is then late by at most that much, never lost).

The follower knows streams, cursors and connections, not subscribers: it hands every entry, in
order and once, to the :class:`Sink` it was given with the stream (the hub's fan-out).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Iterable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.crc import key_slot
from redis.exceptions import ResponseError

from hermes_queue.redisio.health import OutageLog
from hermes_queue.redisio.pipeline import dedicated_connection
from hermes_queue.redisio.redirections import Redirection, redirection
from hermes_queue.streams.codec import split_published
from hermes_queue.streams.followed import Followed, Sink, dispatch, pack_xread, xread_head
from hermes_queue.streams.reader import BACKOFF_MAX, BACKOFF_MIN, REDIS_DOWN, id_key

log = logging.getLogger(__name__)

# How long past a poll an XREAD's reply may take before the connection counts as lost.
REPLY_GRACE_SECONDS = 10.0
# Replies heard at most before the streams they mark are read: bounds a read's delay under a
# flood of messages.
_RECEIVED_MAX = 1_000


# The redirections of a slot mid-migration: they concern that slot's XREAD alone.
_MIGRATING = ("ASK", "TRYAGAIN")

_MESSAGES = (b"message", b"smessage")
_CONFIRMATIONS = (b"subscribe", b"ssubscribe")


class Follower:
    """``follow()`` and ``unfollow()`` streams between ``start()`` and ``aclose()``."""

    def __init__(
        self,
        redis: Redis,
        *,
        count: int,
        poll_seconds: float,
        client_name: str,
        sharded: bool = False,
    ) -> None:
        self.redis = redis
        # On a Redis Cluster the scripts publish with SPUBLISH (runs/scripts.py): subscribe to
        # the sharded channels, on the node serving them (streams/sharded.py).
        self.sharded = sharded
        self._subscribe = "SSUBSCRIBE" if sharded else "SUBSCRIBE"
        self._unsubscribe = "SUNSUBSCRIBE" if sharded else "UNSUBSCRIBE"
        self.count = count  # entries per stream per XREAD
        self.poll_seconds = poll_seconds
        self.client_name = client_name
        # An XREAD names only the streams to read, each with its cursor: pack it by hand
        # from pre-encoded pieces rather than through redis-py's generic pack_command.
        self._xread_head = xread_head(count)
        self._streams: dict[str, Followed] = {}
        self._dirty: set[str] = set()  # followed streams to read from their cursor
        self._changed = asyncio.Event()  # a stream was followed
        self._subscribed: set[str] = set()  # channels SUBSCRIBE was sent for, this connection
        self._to_subscribe: set[str] = set()  # followed since the last SUBSCRIBE went out
        self._unsubscribe_due = False  # the next sync also unsubscribes what is not followed
        self._listener: AbstractConnection | None = None  # pub/sub: the published entries
        self._conn: AbstractConnection | None = None  # the XREADs
        self._task: asyncio.Task[None] | None = None
        self._syncer: asyncio.Task[None] | None = None
        self.xreads = 0
        # XREADs of a slot mid-migration, by Redis' answer (ASK, TRYAGAIN).
        self.unreadable: collections.Counter[str] = collections.Counter()
        self.listener_client_id: int | None = None
        # Connections to Redis lost so far: Redis may come back without its data (a restart
        # without persistence), so readers re-check that their runs still exist (api/feed.py).
        self.losses = 0
        self.closed = False

    @property
    def started(self) -> bool:
        return self._task is not None

    @property
    def following(self) -> int:
        """How many streams are followed."""
        return len(self._streams)

    def follow(self, key: str, run_id: str, cursor: str, seq: int | None, sink: Sink) -> None:
        """Hand ``sink`` every entry of ``key`` after ``cursor`` (the entry numbered ``seq``,
        when known): subscribe to its channel; the confirmation makes the reader read the
        stream once (whatever was written meanwhile).

        SUBSCRIBE is sent even if the channel is still subscribed (its UNSUBSCRIBE deferred):
        messages heard while it was not followed were dropped, and Redis confirms a repeated
        SUBSCRIBE too, so the read after the confirmation covers them as it covers the rest.
        """
        self._streams[key] = Followed(key, run_id, cursor, seq, sink)
        self._to_subscribe.add(key)
        self._sync_subscriptions()
        self._changed.set()

    def unfollow(self, key: str) -> None:
        """Stop following ``key``; the result of a read of it in flight is ignored. Its channel
        is unsubscribed at the next poll, with every other channel dropped meanwhile: one
        UNSUBSCRIBE a poll, not one per stream, and none for a stream followed again before
        (a client reconnecting). Meanwhile its messages are heard and ignored."""
        if self._streams.pop(key, None) is None:
            return
        self._dirty.discard(key)
        self._to_subscribe.discard(key)

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

    # -- the pub/sub subscriptions ---------------------------------------------------------------
    def _sync_subscriptions(self) -> None:
        """Bring the channels subscribed to in line with the streams followed (one task)."""
        if self._syncer is None or self._syncer.done():
            self._syncer = asyncio.create_task(self._sync(), name="stream-hub-subscribe")

    async def _sync(self) -> None:
        """Send SUBSCRIBE for the streams followed since, and UNSUBSCRIBE when due for those no
        longer followed; the reader reads the confirmations.

        Sent from here, not the reader, because the reader is parked on the pub/sub socket
        waiting for the next message; a write does not disturb that read.
        """
        await asyncio.sleep(0)  # let a burst of new streams go out in one SUBSCRIBE
        while not self.closed:
            listener = self._listener
            if listener is None or not listener.is_connected:
                return  # the reader (re)connects and subscribes to everything followed
            added = self._to_subscribe & self._streams.keys()
            self._to_subscribe.clear()
            dropped: set[str] = set()
            if self._unsubscribe_due:
                self._unsubscribe_due = False
                dropped = self._subscribed - self._streams.keys()
            if not added and not dropped:
                return
            try:
                if added:
                    self._subscribed |= added
                    for channels in self._by_slot(added):
                        await listener.send_command(self._subscribe, *channels)
                if dropped:
                    self._subscribed -= dropped
                    for channels in self._by_slot(dropped):
                        await listener.send_command(self._unsubscribe, *channels)
            except REDIS_DOWN as exc:  # the reader sees the same connection fail
                log.warning("stream hub SUBSCRIBE failed: %r", exc)
                return

    async def _connect_listener(self) -> AbstractConnection:
        listener = dedicated_connection(
            self.redis, f"{self.client_name}:entries", decode_responses=False
        )
        try:  # timed here: redis-py's own read timeout answers None, not an error
            async with asyncio.timeout(self.poll_seconds + REPLY_GRACE_SECONDS):
                await listener.connect()  # type: ignore[no-untyped-call]
                await listener.send_command("CLIENT", "ID")
                self.listener_client_id = int(await listener.read_response())
        except BaseException:
            await listener.disconnect(nowait=True)  # not the follower's yet: nothing else would
            raise
        self._subscribed = set()
        self._to_subscribe = set(self._streams)
        self._listener = listener
        return listener

    # -- the reader ------------------------------------------------------------------------------
    async def _run(self) -> None:
        backoff = BACKOFF_MIN
        outage = OutageLog(log, "stream hub")
        loop = asyncio.get_running_loop()
        next_poll = loop.time() + self.poll_seconds
        while not self.closed:
            if loop.time() >= next_poll:  # busy or not, everything is read once per poll
                next_poll = loop.time() + self.poll_seconds
                self._hear(None)
                if self._subscribed - self._streams.keys():
                    self._unsubscribe_due = True
                    self._sync_subscriptions()
            try:
                if self._listener is None:
                    if not self._streams:
                        self._changed.clear()
                        await self._changed.wait()  # idle: no connection, no Redis traffic
                        continue
                    await self._connect_listener()
                    self._sync_subscriptions()
                    # Nothing published while disconnected was heard: read everything.
                    self._dirty.update(self._streams)
                elif not self._dirty:
                    wait = max(0.0, next_poll - loop.time())
                    reply = await self._listener.read_response(timeout=wait)
                    if reply is not None:  # None: the poll is due, the loop's first step
                        self._hear(reply)
                        if self._dirty:  # a read follows: let it serve what else arrived
                            await self._hear_received()
                while self._dirty and not self.closed:
                    await self._read_dirty()
                backoff = BACKOFF_MIN
                outage.ok()
            except Exception as exc:  # never die: Redis restarts, CLIENT KILL, errors
                outage.failed(exc)  # logged once per outage, not per retry
                self.losses += 1
                for conn in (self._listener, self._conn):
                    if conn is not None:
                        await conn.disconnect(nowait=True)
                self._listener = self._conn = None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)

    def _hear(self, message: Any) -> None:
        """Mark what a pub/sub reply concerns for reading; None (the poll): every stream."""
        if message is None:
            self._dirty.update(self._streams)
            return
        kind, channel = message[0], message[1]
        if kind == b"sunsubscribe" and channel.decode() in self._streams:
            # Redis dropped a sharded subscription we hold: its slot moved (a failover, a
            # resharding). Reconnect, to the node serving it now, and read everything.
            raise ConnectionError(f"sharded channel {channel!r} unsubscribed by Redis")
        if kind not in _MESSAGES and kind not in _CONFIRMATIONS:
            return
        key = channel.decode()
        stream = self._streams.get(key)
        if stream is None:
            return
        if kind in _MESSAGES and key not in self._dirty and stream.seq is not None:
            # The entry itself: hand it on if it is the next one, skip it if already read.
            entry = split_published(message[2])
            if entry is not None:
                entry_id, seq, flat = entry
                if seq <= stream.seq:
                    if id_key(entry_id.decode()) <= id_key(stream.cursor):
                        return  # already read
                    # A later entry numbered like one read: a failover lost entries. Read it.
                elif seq == stream.seq + 1:
                    self._dispatch({key: stream}, [(channel, [(entry_id, flat)])])
                    return
        # A gap, an entry we cannot place, or a subscription now in effect: read the stream.
        self._dirty.add(key)

    async def _hear_received(self) -> None:
        """Hear every reply already received before reading any stream, so one XREAD serves
        them all: the confirmations of one SUBSCRIBE of many channels arrive together, and so
        do messages of many streams under load. Never waits: a read with timeout 0 returns a
        reply already buffered, else None. Called only when a read is due (a message in
        order, the common case, needs none): the empty read costs a cancelled socket read."""
        for _ in range(_RECEIVED_MAX):
            listener = self._listener
            if listener is None:
                return
            reply = await listener.read_response(timeout=0)
            if reply is None:
                return
            self._hear(reply)

    async def _read_dirty(self) -> None:
        """One non-blocking XREAD of the streams marked; a stream that filled its page stays
        marked (there may be more)."""
        reading = {
            key: stream for key in self._dirty if (stream := self._streams.get(key)) is not None
        }
        self._dirty.clear()
        if not reading:
            return
        if self._conn is None or not self._conn.is_connected:
            self._conn = dedicated_connection(self.redis, self.client_name, decode_responses=False)
            await self._conn.connect()  # type: ignore[no-untyped-call]
        # One XREAD per slot (a cluster node's streams span its shards' slots), pipelined.
        groups = [{key: reading[key] for key in keys} for keys in self._by_slot(reading)]
        self.xreads += len(groups)
        try:
            packed = b"".join(self._pack_xread(group) for group in groups)
            await self._conn.send_packed_command(packed, check_health=False)
            replies = [await self._reply(self._conn) for _ in groups]
        except BaseException:
            self._dirty.update(reading)  # read them again once reconnected
            raise
        for group, reply in zip(groups, replies, strict=True):
            if isinstance(reply, Redirection):
                # That slot is being migrated: its streams are read again at the next poll
                # (and, once the move is over, Redis unsubscribes their channels here: the
                # follower reconnects and is regrouped onto the node that serves them). The
                # other slots' streams go on.
                self.unreadable[reply.kind] += 1
                continue
            for key, count in self._dispatch(group, reply).items():
                if count >= self.count:
                    self._dirty.add(key)

    async def _reply(self, conn: AbstractConnection) -> Any:
        """One XREAD's reply. ``ASK`` or ``TRYAGAIN`` (a slot mid-migration) is returned, not
        raised: it concerns that command's slot alone, and the connection stays in step for
        the next reply. Any other error, or no reply in time, raises: the follower reconnects
        (a ``MOVED`` so regroups the streams by node). The timeout is ours, not redis-py's,
        which would return None for it, as it returns XREAD's "nothing new", and leave the
        late reply to be taken for the next command's."""
        try:
            async with asyncio.timeout(self.poll_seconds + REPLY_GRACE_SECONDS):
                return await conn.read_response(disconnect_on_error=False)
        except ResponseError as error:
            moving = redirection(error)
            if moving is None or moving.kind not in _MIGRATING:
                raise
            return moving

    def _by_slot(self, keys: Iterable[str]) -> list[list[str]]:
        """``keys`` in groups one command may name: one group without a cluster; on a cluster
        one per hash slot (a follower of a node follows the streams of several shards)."""
        if not self.sharded:
            return [list(keys)]
        groups: dict[int, list[str]] = {}
        for key in keys:
            groups.setdefault(key_slot(key.encode()), []).append(key)
        return list(groups.values())

    def export(self) -> list[tuple[str, str, str, int | None, Sink]]:
        """Every followed stream as ``follow`` takes it (key, run id, cursor, seq, sink): what
        moves to another follower when a cluster's shards are grouped anew (``sharded.py``)."""
        return [(key, s.run_id, s.cursor, s.seq, s.sink) for key, s in list(self._streams.items())]

    def _pack_xread(self, reading: dict[str, Followed]) -> bytes:
        return pack_xread(self._xread_head, reading.values())

    def _dispatch(self, reading: dict[str, Followed], reply: Any) -> dict[str, int]:
        return dispatch(reading, reply, self._streams)


__all__ = ["Follower", "Sink"]
