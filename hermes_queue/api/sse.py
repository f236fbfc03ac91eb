"""Server-sent events: framing, keepalive, resume cursors, and the one loop every stream uses.

The framing is written here rather than with aiohttp-sse because clients of upstream Hermes
parse its exact bytes: ``\\n`` line ends, ``: keepalive`` and ``: stream closed`` comments, and
frames with or without an ``event:`` line. Every frame carries ``id:`` = the Redis Stream entry
id, which is what ``Last-Event-ID`` resumes from.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web

from hermes_queue.api.appkeys import HUB, RUNS, SETTINGS
from hermes_queue.api.errors import ApiError
from hermes_queue.events import RunEvent, format_stream_id, parse_stream_id

# One rendered frame: (event name or None for an unnamed frame, JSON payload or raw string).
Frame = tuple[str | None, dict[str, Any] | str]
Renderer = Callable[[RunEvent], Iterable[Frame]]

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


def _id_tuple(stream_id: str) -> tuple[int, int]:
    parsed = parse_stream_id(stream_id)
    return parsed if parsed else (0, 0)


async def check_cursor(request: web.Request, run_id: str, cursor: str | None) -> bool:
    """Validate the cursor against the run's stream; True when nothing can follow it.

    A cursor past the newest entry can only be invented (real ones come from our own ``id:``
    lines), and waiting on it would hang, so it is rejected.
    """
    redis = request.app[RUNS].redis
    newest = await redis.xrevrange(request.app[RUNS].keys.events(run_id), count=1)
    newest_id = _id_tuple(newest[0][0].decode()) if newest else (0, 0)
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


def encode_frame(event_name: str | None, payload: dict[str, Any] | str, event_id: str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    lines = []
    if event_id:
        lines.append(f"id: {event_id}")
    if event_name:
        lines.append(f"event: {event_name}")
    lines.append(f"data: {data}")
    return ("\n".join(lines) + "\n\n").encode()


async def pump_run_events(
    request: web.Request,
    response: web.StreamResponse,
    run_id: str,
    cursor: str | None,
    render: Renderer,
) -> bool:
    """Write the run's events after ``cursor`` until its terminal event.

    Returns True when the terminal event was written, False when the client went away (a
    client disconnect never touches the run).
    """
    keepalive = request.app[SETTINGS].keepalive_seconds
    try:
        async with request.app[HUB].subscribe(run_id, cursor) as subscription:
            while True:
                event = await subscription.get(timeout=keepalive)
                if event is None:
                    await response.write(b": keepalive\n\n")
                    continue
                chunk = b"".join(
                    encode_frame(name, payload, event.id) for name, payload in render(event)
                )
                if chunk:
                    await response.write(chunk)
                if event.terminal:
                    return True
    except (ConnectionResetError, ConnectionError):
        return False
