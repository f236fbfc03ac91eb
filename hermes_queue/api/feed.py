"""Following a run for a handler: its events as SSE, or its final reply.

:class:`RunFeed` is the one way handlers read runs' events: through the process's stream hub
(one reader of Redis for every client), plus the two reads of a run's keys that streaming
needs besides its events (the stream head, the record's existence). An answer that is not a
stream (a chat completion, a session chat reply, a stored response) waits for the run's end
with :meth:`RunFeed.final_reply` (the reply folded by ``replies.ReplyText``).

Per event the pump does as little as it can: it takes every event the subscription already
holds and sends their frames in one write (frames are never split across writes), an event's
frames are rendered once per process however many clients watch it when the renderer is shared
(stateless, ``http/sse.py``), and the last batch, the closing comment and the end of the
chunked body leave in one write.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis.asyncio as aioredis
from aiohttp import web
from redis.asyncio.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.api.drain import Drain
from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.client_gone import on_client_gone
from hermes_queue.api.http.sse import (
    EndStream,
    Renderer,
    cursor_at_end,
    drained_bytes,
    event_bytes,
    keepalive_of,
    lost_bytes,
)
from hermes_queue.events import RunEvent
from hermes_queue.keys import Keys
from hermes_queue.replies import ReplyText
from hermes_queue.runs.model import RunRecord
from hermes_queue.streams.hub import StreamHub, Subscription
from hermes_queue.streams.reader import ZERO_ID, Page

if TYPE_CHECKING:
    from hermes_queue.api.turns.starter import Enqueued
    from hermes_queue.tracing.spans import Tracing

# Events taken from a subscription per write: bounds one write, never splits an event's frames.
MAX_BATCH = 256

# A stream idle for this many keepalives re-checks that its run still exists, so a client never
# waits forever on a run whose record is gone (one EXISTS a minute per idle client by default);
# so does one at its first keepalive after the hub lost its Redis connection (a restart may
# have lost the run), which ends it within a keepalive of Redis coming back.
RECORD_CHECK_EVERY = 6


@dataclass(frozen=True)
class Prefetched:
    """What a new events request reads before streaming, from one Redis round trip: the run
    record (None: no such run), the first replay page, and where the stream ended as seen from
    ``cursor`` (the client's cursor, which :meth:`at_end` checks)."""

    record: RunRecord | None
    page: Page
    cursor: str | None
    newest: str

    def at_end(self) -> bool:
        """:func:`cursor_at_end` for this run and cursor (raises the same 400)."""
        return cursor_at_end(self.cursor, self.newest)


@dataclass(frozen=True)
class FinalReply:
    """What a run said, read from its events to the terminal one (of its last attempt: a
    retried attempt starts the reply over)."""

    terminal: RunEvent
    # The text of the attempt's deltas.
    streamed: str
    # The reply as shown (``assistant.completed``: MEDIA tags inlined), if the run wrote one.
    shown: str | None


class RunUnfinished(ApiError):
    """The run's events ended without a terminal event: the process's hub closed under the
    reader (the process is stopping)."""

    def __init__(self) -> None:
        super().__init__(500, "internal_error", "The run ended without a terminal event")


class DrainCut(RunUnfinished):
    """The process's stream-drain bound passed before the run ended (api/drain.py): the run
    goes on; a retry on another replica (with the same ``Idempotency-Key``: the same run)
    gets its reply."""

    def __init__(self) -> None:
        ApiError.__init__(
            self,
            503,
            "gateway_draining",
            "This API process shut down before the turn ended; the turn goes on: retry with "
            "the same Idempotency-Key, or read the session, on another replica",
            headers={"Retry-After": "1"},
        )


class RunFeed:
    """Following runs' events: as SSE (:meth:`prefetch`, :meth:`pump`) or to their final reply
    (:meth:`final_reply`). Every reader is stopped when the process's stream-drain bound passes
    (``drain``), and ends as its dialect says (``sse.drained_bytes``, :class:`DrainCut`)."""

    def __init__(
        self,
        hub: StreamHub,
        redis: aioredis.Redis,
        keys: Keys,
        keepalive_seconds: float,
        drain: Drain | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self._hub = hub
        # Notes a reader's first frame (its delay after the run's first event), when on.
        self._tracing = tracing
        self._redis = redis
        self._keys = keys
        self._keepalive = keepalive_seconds
        self._drain = drain or Drain()

    async def prefetch(
        self, run_id: str, cursor: str | None, *, from_start: bool = False
    ) -> Prefetched:
        """The record, first page and stream head for :meth:`pump`, the page read after
        ``cursor`` (from the run's first event if ``from_start``). The record is read before
        the stream's end, so "terminal and at the end" means no event can follow.

        The page read from ``cursor`` tells where the stream ends as seen from it
        (:func:`~hermes_queue.streams.reader.page_tip`), so the head is read separately
        (``XREVRANGE``) only for a page read from elsewhere, which may stop short of it.
        """
        keys = self._keys
        head = from_start and cursor is not None

        def lookups(pipe: Pipeline) -> None:
            pipe.hgetall(keys.run(run_id))
            if head:
                pipe.xrevrange(keys.events(run_id), count=1)

        replies, page, tip = await self._hub.prefetch(
            run_id, None if from_start else cursor, lookups
        )
        if head:
            tip = replies[1][0][0].decode() if replies[1] else ZERO_ID
        record = RunRecord.from_hash(replies[0]) if replies[0] else None
        return Prefetched(record, page, cursor, tip)

    async def final_reply(
        self,
        run_id: str,
        observe: Callable[[RunEvent], object] | None = None,
        *,
        dialect: str | None = "hermes",
        created: Enqueued | None = None,
    ) -> FinalReply:
        """Wait for the run's terminal event, reading it from its first; ``observe`` sees every
        event on the way (a stored response folds them). Raises :class:`RunUnfinished` when the
        events end first, :class:`DrainCut` when the stream-drain bound stopped the wait
        (counted as ``dialect``'s; None: a wait no client is behind, not counted).
        ``created``: the run as this request created it (see :meth:`_subscribe`)."""
        async with self._subscribe(run_id, None, None, created) as subscription:
            forget = self._drain.watch(subscription.abandon)
            try:
                reply = await self._final(subscription, observe)
            finally:
                forget()
            if reply is not None:
                return reply
        if self._drain.cutting:
            if dialect is not None:
                self._drain.cut(dialect)
            raise DrainCut()
        raise RunUnfinished()

    @staticmethod
    async def _final(
        subscription: Subscription, observe: Callable[[RunEvent], object] | None
    ) -> FinalReply | None:
        """The reply, read to the terminal event; None when the events end first."""
        reply = ReplyText()
        async for event in subscription:
            if observe is not None:
                observe(event)
            reply.add(event)
            if event.terminal:
                return FinalReply(event, reply.text, reply.shown)
        return None

    def _subscribe(
        self, run_id: str, cursor: str | None, page: Page | None, created: Enqueued | None
    ) -> AbstractAsyncContextManager[Subscription]:
        """The hub's subscription; for a run this request has just ``created`` (None: any other
        run), without a replay read and, when its creating script wrote it, without writing
        this process's reader entry again (``StreamHub.subscribe``'s ``fresh`` and
        ``reader_written``)."""
        return self._hub.subscribe(
            run_id,
            cursor,
            page=page,
            fresh=created is not None,
            reader_written=created is not None and created.reader_written,
        )

    async def _exists(self, run_id: str) -> bool:
        return bool(await self._redis.exists(self._keys.run(run_id)))

    async def _lost(self, run_id: str) -> bool | None:
        """Whether the run's record is gone; None while Redis cannot tell (it is away)."""
        try:
            return not await self._exists(run_id)
        except (RedisConnectionError, RedisTimeoutError, OSError):
            return None

    async def pump(
        self,
        request: web.BaseRequest,
        response: web.StreamResponse,
        run_id: str,
        cursor: str | None,
        render: Renderer,
        *,
        page: Page | None = None,
        end: bytes | None = None,
        created: Enqueued | None = None,
    ) -> bool:
        """Write the run's events after ``cursor`` until its terminal event.

        Returns True when the terminal event was written, False when the client went away (a
        client disconnect never touches the run, but it stops counting as the run's reader at
        once: ``on_client_gone``) or the server is shutting down. ``page``: the
        first replay page from :meth:`prefetch` for this ``cursor``. ``end``: bytes to close
        the response with after the terminal event; they leave with its frames and the end of
        the body in one write (the response is then finished: write nothing more).
        ``created``: the run as this request created it (see :meth:`_subscribe`).
        """
        subscribing = self._subscribe(run_id, cursor, page, created)
        try:
            async with subscribing as subscription:
                forget = on_client_gone(request, subscription.abandon)
                unwatch = self._drain.watch(subscription.abandon)
                try:
                    return await self._pump(response, run_id, render, subscription, end)
                finally:
                    unwatch()
                    forget()
        except (ConnectionResetError, ConnectionError):
            return False

    async def _pump(
        self,
        response: web.StreamResponse,
        run_id: str,
        render: Renderer,
        subscription: Subscription,
        end: bytes | None,
    ) -> bool:
        idle = 0
        keepalive = keepalive_of(render)
        checked = self._hub.connection_losses  # changed: Redis was away, may have lost the run
        traced = self._tracing  # notes the first frame's delay, then None
        while True:
            events = await subscription.get_many(timeout=self._keepalive, max_items=MAX_BATCH)
            if not events:
                if subscription.finished:  # the hub closed, the client left, or the bound
                    if self._drain.cutting:
                        closing, dialect = drained_bytes(run_id, render)
                        await response.write_eof(closing)
                        self._drain.cut(dialect)
                    return False
                idle += 1
                losses = self._hub.connection_losses
                if idle % RECORD_CHECK_EVERY == 0 or losses != checked:
                    lost = await self._lost(run_id)
                    if lost:  # expired, or Redis lost its data: nothing follows
                        await response.write(lost_bytes(run_id, render))
                        return False
                    if lost is not None:  # known now (not while Redis is away)
                        checked = losses
                await response.write(keepalive)
                continue
            idle = 0
            if traced is not None:
                traced.first_frame(run_id, events[0].ts, events[0].seq)
                traced = None
            chunks: list[bytes] = []
            try:
                for event in events:
                    chunks.append(event_bytes(event, render))
            except EndStream as ended:
                chunks.append(ended.encoded())
                await response.write_eof(b"".join(chunks))
                return True
            chunk = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            if events[-1].terminal:  # a batch ends at the terminal event, if it has it
                if end is not None:
                    await response.write_eof(chunk + end)
                elif chunk:
                    await response.write(chunk)
                return True
            if chunk:
                await response.write(chunk)
