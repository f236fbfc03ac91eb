"""Server-sent events: framing, keepalive, resume cursors, and the one loop every stream uses.

The framing is written here rather than with aiohttp-sse because clients of upstream Hermes
parse its exact bytes: ``\\n`` line ends, ``: keepalive`` and ``: stream closed`` comments, and
frames with or without an ``event:`` line. A renderer gives each frame its ``id:``: the Redis
Stream entry id of the event it shows, which is what ``Last-Event-ID`` resumes from. One entry
is at most one frame besides a closer (``done``, ``[DONE]``, which carry no id), so every frame
has its own id and a client cut off between any two frames resumes right after the last one it
saw (``events.py``). The Responses dialect numbers its frames instead (``sequence_number``).

Per event the pump does as little as it can: it takes every event the subscription already
holds and sends their frames in one write (frames are never split across writes), an event's
frames are rendered once per process however many clients watch it when the renderer is shared
(stateless), and the last batch, the closing comment and the end of the chunked body leave in
one write.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from aiohttp import web
from redis.asyncio.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.client_gone import on_client_gone
from hermes_queue.events import RunEvent, format_stream_id, lost_event, parse_stream_id
from hermes_queue.keys import Keys
from hermes_queue.runs.model import RunRecord
from hermes_queue.streams.hub import StreamHub, Subscription
from hermes_queue.streams.reader import ZERO_ID, Page

# One rendered frame: (event name or None for an unnamed frame, JSON payload or raw string,
# its id line: "" for none).
Frame = tuple[str | None, dict[str, Any] | str, str]
Renderer = Callable[[RunEvent], Iterable[Frame]]


class EndStream(Exception):
    """Raised by a renderer whose dialect must end the stream at this event although the run
    goes on or is gone (an OpenAI dialect meeting what it has no frame for: a lost run, a
    restart after text it showed, a gap): ``frames`` are the dialect's own terminal frames, and
    nothing is written after them (a strict client refuses even a comment after ``[DONE]``)."""

    def __init__(self, frames: list[Frame]) -> None:
        super().__init__("the dialect ended the stream")
        self.frames = frames

    def encoded(self) -> bytes:
        return b"".join([encode_frame(name, payload, fid) for name, payload, fid in self.frames])


# Renderers that are pure functions of one event, whose bytes all clients of a process share.
_SHARED: set[Renderer] = set()


def shared(render: Renderer) -> Renderer:
    """Mark ``render`` stateless: its frames for an event may be encoded once per process."""
    _SHARED.add(render)
    return render


SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


def resume_cursor(request: web.Request) -> str | None:
    """The client's cursor (``Last-Event-ID`` header, else ``?after=``), validated."""
    raw = request.headers.get("Last-Event-ID")
    if raw is None or not raw.strip():
        raw = request.query.get("after")
    if raw is None or not raw.strip():
        return None
    parsed = parse_stream_id(raw)
    if parsed is None:
        raise ApiError(
            400,
            "invalid_last_event_id",
            "Last-Event-ID / after must be a stream id such as 1712345678901-0",
            param="Last-Event-ID",
        )
    return format_stream_id(parsed)


# Events taken from a subscription per write: bounds one write, never splits an event's frames.
MAX_BATCH = 256
STREAM_CLOSED = b": stream closed\n\n"
KEEPALIVE = b": keepalive\n\n"


def _id_tuple(stream_id: str) -> tuple[int, int]:
    parsed = parse_stream_id(stream_id)
    return parsed if parsed else (0, 0)


def cursor_at_end(cursor: str | None, newest: str) -> bool:
    """Validate the cursor against the run's stream head (``newest``: the newest entry's id,
    ``0-0`` for none, or an id that compares with ``cursor`` as it does); True when nothing
    can follow it.

    A cursor past the newest entry can only be invented (real ones come from our own ``id:``
    lines), and waiting on it would hang, so it is rejected.
    """
    newest_id = _id_tuple(newest)
    if cursor is not None and _id_tuple(cursor) > newest_id:
        raise ApiError(
            400,
            "invalid_last_event_id",
            "Last-Event-ID is ahead of this run's event stream",
            param="Last-Event-ID",
        )
    return cursor is not None and _id_tuple(cursor) == newest_id


async def open_stream(
    request: web.Request, headers: dict[str, str] | None = None
) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={**SSE_HEADERS, **(headers or {})})
    await response.prepare(request)
    return response


# json.dumps(payload, ensure_ascii=False) builds an encoder per call; this one is reused.
_to_json = json.JSONEncoder(ensure_ascii=False).encode


def encode_frame(event_name: str | None, payload: dict[str, Any] | str, event_id: str) -> bytes:
    data = payload if isinstance(payload, str) else _to_json(payload)
    head = f"id: {event_id}\n" if event_id else ""
    if event_name:
        head = f"{head}event: {event_name}\n"
    return f"{head}data: {data}\n\n".encode()


# (id(event), renderer) -> (event, its frames). With many clients on one run every one of them
# is sent the same event object by the hub, so a shared renderer's frames are encoded once. The
# event is kept in the value so a reused id() never matches; FIFO-bounded.
_RENDERED: dict[tuple[int, Renderer], tuple[RunEvent, bytes]] = {}
_RENDERED_MAX = 1024


def event_bytes(event: RunEvent, render: Renderer) -> bytes:
    """All frames of ``event`` in ``render``'s dialect, encoded (b"" when it renders none)."""
    cached = render in _SHARED and bool(event.id)  # a stream.gap is per client
    key = (id(event), render)
    if cached:
        hit = _RENDERED.get(key)
        if hit is not None and hit[0] is event:
            return hit[1]
    data = b"".join([encode_frame(name, payload, fid) for name, payload, fid in render(event)])
    if cached:
        _RENDERED[key] = (event, data)
        if len(_RENDERED) > _RENDERED_MAX:
            del _RENDERED[next(iter(_RENDERED))]
    return data


# A stream idle for this many keepalives re-checks that its run still exists, so a client never
# waits forever on a run whose record is gone (one EXISTS a minute per idle client by default);
# so does one at its first keepalive after the hub lost its Redis connection (a restart may
# have lost the run), which ends it within a keepalive of Redis coming back.
RECORD_CHECK_EVERY = 6


def run_lost_frame(run_id: str) -> bytes:
    """The explicit end of a stream whose run Redis no longer has (its retention passed, or
    Redis restarted without its data), in the Hermes dialects: a ``stream.error`` frame, then
    the closing comment. The OpenAI dialects end with their own terminal instead (a renderer
    fed :func:`~hermes_queue.events.lost_event` raises :class:`EndStream`)."""
    payload = {
        "event": "stream.error",
        "run_id": run_id,
        "error": {
            "message": "This run no longer exists in Redis: no event can follow",
            "type": "server_error",
            "code": "run_lost",
        },
    }
    return encode_frame("stream.error", payload, "") + b": run not found\n\n"


def _lost_bytes(run_id: str, render: Renderer) -> bytes:
    """How a stream whose run is gone ends in ``render``'s dialect."""
    try:
        shown = event_bytes(lost_event(run_id), render)
    except EndStream as ended:
        return ended.encoded()
    return shown + run_lost_frame(run_id)


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


class RunFeed:
    """Following runs' events as SSE: the process's stream hub, plus the two reads of a run's
    keys that streaming needs besides its events (the stream head, the record's existence)."""

    def __init__(
        self, hub: StreamHub, redis: aioredis.Redis, keys: Keys, keepalive_seconds: float
    ) -> None:
        self._hub = hub
        self._redis = redis
        self._keys = keys
        self._keepalive = keepalive_seconds

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
    ) -> bool:
        """Write the run's events after ``cursor`` until its terminal event.

        Returns True when the terminal event was written, False when the client went away (a
        client disconnect never touches the run, but it stops counting as the run's reader at
        once: ``on_client_gone``) or the server is shutting down. ``page``: the
        first replay page from :meth:`prefetch` for this ``cursor``. ``end``: bytes to close
        the response with after the terminal event; they leave with its frames and the end of
        the body in one write (the response is then finished: write nothing more).
        """
        try:
            async with self._hub.subscribe(run_id, cursor, page=page) as subscription:
                forget = on_client_gone(request, subscription.abandon)
                try:
                    return await self._pump(response, run_id, render, subscription, end)
                finally:
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
        checked = self._hub.connection_losses  # changed: Redis was away, may have lost the run
        while True:
            events = await subscription.get_many(timeout=self._keepalive, max_items=MAX_BATCH)
            if not events:
                if subscription.finished:  # the hub closed, or the client left
                    return False
                idle += 1
                losses = self._hub.connection_losses
                if idle % RECORD_CHECK_EVERY == 0 or losses != checked:
                    lost = await self._lost(run_id)
                    if lost:  # expired, or Redis lost its data: nothing follows
                        await response.write(_lost_bytes(run_id, render))
                        return False
                    if lost is not None:  # known now (not while Redis is away)
                        checked = losses
                await response.write(KEEPALIVE)
                continue
            idle = 0
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
