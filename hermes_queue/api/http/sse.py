"""Server-sent events: framing, keepalive, resume cursors (the loop that writes a run's
events is ``api/feed.py``).

The framing is written here rather than with aiohttp-sse because clients of upstream Hermes
parse its exact bytes: ``\\n`` line ends, ``: keepalive`` and ``: stream closed`` comments, and
frames with or without an ``event:`` line. A renderer gives each frame its ``id:``: the Redis
Stream entry id of the event it shows, which is what ``Last-Event-ID`` resumes from. One entry
is at most one frame besides a closer (``done``, ``[DONE]``, which carry no id), so every frame
has its own id and a client cut off between any two frames resumes right after the last one it
saw (``events.py``). The Responses dialect numbers its frames instead (``sequence_number``).

An event's frames are rendered once per process however many clients watch it when the
renderer is shared (stateless): :func:`event_bytes`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web

from hermes_queue.api.errors import ApiError
from hermes_queue.events import (
    RunEvent,
    drained_event,
    format_stream_id,
    lost_event,
    parse_stream_id,
)

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


STREAM_CLOSED = b": stream closed\n\n"
KEEPALIVE = b": keepalive\n\n"
# The OpenAI dialects' keepalive: a lone comment line, without the blank line that ends an
# event. The openai SDK's decoder (openai-python, 2.24 at least) keeps the last ``id:`` across
# events, so once a frame had one it dispatches an empty event at the blank line ending a
# comment-only block, then fails to parse its empty data as JSON: every keepalive (any silence
# of ``keepalive_seconds``, e.g. a long tool step) broke an SDK stream. A comment line is
# ignored by every SSE parser and still keeps the connection busy.
KEEPALIVE_LINE = b": keepalive\n"
# How a Hermes-dialect stream ends when its API process stops before the run does (the
# stream-drain bound, api/drain.py): no event and no ``id:`` (the client's last id is the last
# frame it got), ``retry:`` so an EventSource reconnects within a second, through the load
# balancer to another replica, with ``Last-Event-ID``; the comment says so to anyone else.
# Unlike ``: stream closed`` it does not say the run ended (docs/compatibility.md).
RESUME_FRAME = b"retry: 1000\n: server draining; reconnect with Last-Event-ID to resume\n\n"


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


# Set on a request once its event stream's headers are sent: an error after that can no longer
# be answered with a JSON envelope (api/middlewares.py lets aiohttp cut the connection instead).
STREAM_OPEN = web.RequestKey("stream_open", bool)


async def open_stream(
    request: web.Request, headers: dict[str, str] | None = None
) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={**SSE_HEADERS, **(headers or {})})
    await response.prepare(request)
    request[STREAM_OPEN] = True
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


def keepalive_of(render: Renderer) -> bytes:
    """The keepalive of ``render``'s dialect (a renderer may name its own: ``keepalive``)."""
    keepalive: bytes = getattr(render, "keepalive", KEEPALIVE)
    return keepalive


def drained_bytes(run_id: str, render: Renderer) -> tuple[bytes, str]:
    """How a stream the stream-drain bound cuts ends in ``render``'s dialect, and which
    dialect that is (``hermes``: resumable; ``openai``: its error chunk, not resumable)."""
    try:
        shown = event_bytes(drained_event(run_id), render)
    except EndStream as ended:
        return ended.encoded(), "openai"
    return shown + RESUME_FRAME, "hermes"


def lost_bytes(run_id: str, render: Renderer) -> bytes:
    """How a stream whose run is gone ends in ``render``'s dialect."""
    try:
        shown = event_bytes(lost_event(run_id), render)
    except EndStream as ended:
        return ended.encoded()
    return shown + run_lost_frame(run_id)
