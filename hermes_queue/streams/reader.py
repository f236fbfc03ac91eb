"""Short request/response reads of a run's event stream: catch-up pages and gap detection.

These go through the shared connection pool, never the hub's dedicated connections, so they are
usable without a hub (non-streaming endpoints, tests). The hub uses them to replay history
before switching a subscriber to its live tail.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.events import EventType, RunEvent, parse_stream_id
from hermes_queue.keys import Keys
from hermes_queue.streams.codec import decode_entry

ZERO_ID = "0-0"

# What a read raises while Redis is away (restarting, connection killed): the stream readers
# retry it after a pause that doubles from BACKOFF_MIN up to BACKOFF_MAX seconds.
REDIS_DOWN = (RedisConnectionError, RedisTimeoutError, OSError)
BACKOFF_MIN = 0.1
BACKOFF_MAX = 2.0


# A first replay page: the gap event (if the cursor fell off the stream) and the events after it.
Page = tuple[RunEvent | None, list[RunEvent]]


def id_key(entry_id: str) -> tuple[int, int]:
    """Sort key of a stream id; ids from Redis are always valid, so a bad one is a bug."""
    ms, dash, seq = entry_id.partition("-")
    if dash and ms.isdigit() and seq.isdigit():  # the canonical "ms-seq": no regex needed
        return int(ms), int(seq)
    parsed = parse_stream_id(entry_id)
    if parsed is None:
        raise ValueError(f"not a stream id: {entry_id!r}")
    return parsed


def normalize_cursor(after: str | None) -> str | None:
    """Validate a client cursor (``ms`` or ``ms-seq``) into ``ms-seq``; None stays None."""
    if after is None:
        return None
    parsed = parse_stream_id(after)
    if parsed is None:
        raise ValueError(f"invalid stream cursor: {after!r}")
    return f"{parsed[0]}-{parsed[1]}"


def gap_event(run_id: str, first_available_id: str, missed_from: str) -> RunEvent:
    """The synthesised event that says "entries after your cursor were trimmed away"."""
    return RunEvent(
        type=EventType.STREAM_GAP,
        run_id=run_id,
        id="",
        data={"first_available_id": first_available_id, "missed_from": missed_from},
    )


def _decode(rows: list[Any], run_id: str) -> list[RunEvent]:
    return [decode_entry(run_id, entry_id, fields) for entry_id, fields in rows]


async def read_range(
    redis: Redis, keys: Keys, run_id: str, after: str | None, count: int
) -> list[RunEvent]:
    """At most ``count`` events with id > ``after`` (None = from the start), in stream order."""
    rows = await redis.xrange(keys.events(run_id), min=f"({after or ZERO_ID}", max="+", count=count)
    return _decode(rows, run_id)


async def first_id(redis: Redis, keys: Keys, run_id: str) -> str | None:
    """Id of the oldest entry the stream still holds, None when it is empty or gone."""
    rows = await redis.xrange(keys.events(run_id), min="-", max="+", count=1)
    if not rows:
        return None
    raw = rows[0][0]
    return raw.decode() if isinstance(raw, bytes) else str(raw)


async def read_from_cursor(
    redis: Redis, keys: Keys, run_id: str, cursor: str, count: int
) -> tuple[RunEvent | None, list[RunEvent]]:
    """First catch-up page after ``cursor``, plus a gap event if the cursor fell off the stream.

    The range starts *inclusive* so one round trip tells whether the cursor entry still exists;
    only when it does not do we ask for the stream's head, because a cursor deleted from the
    middle (XDEL) is not a gap, while one older than the head (MAXLEN trim) is.
    """
    if cursor == ZERO_ID:
        return None, await read_range(redis, keys, run_id, cursor, count)
    rows = await redis.xrange(keys.events(run_id), min=cursor, max="+", count=count + 1)
    events = _decode(rows, run_id)
    if events and events[0].id == cursor:
        return None, events[1:]
    head = await first_id(redis, keys, run_id)
    return _with_gap(run_id, cursor, head, events)


def _with_gap(run_id: str, cursor: str, head: str | None, events: list[RunEvent]) -> Page:
    if head is not None and id_key(head) > id_key(cursor):
        return gap_event(run_id, head, cursor), events
    return None, events


def queue_first_page(
    pipe: Pipeline, keys: Keys, run_id: str, cursor: str | None, count: int
) -> int:
    """Queue on ``pipe`` what :func:`first_page` needs (the same reads as ``read_range`` /
    ``read_from_cursor``, the stream head included), so they share a round trip with other
    commands; returns how many commands were queued."""
    key = keys.events(run_id)
    if cursor is None or cursor == ZERO_ID:
        pipe.xrange(key, min=f"({ZERO_ID}", max="+", count=count)
        return 1
    pipe.xrange(key, min=cursor, max="+", count=count + 1)
    pipe.xrange(key, min="-", max="+", count=1)
    return 2


def page_tip(replies: list[Any]) -> str:
    """From the replies of :func:`queue_first_page`'s commands: an id that compares with the
    page's cursor as the stream's newest entry then did, so checking that cursor against the
    stream's end needs no read of its own (``api/feed.py``, the SSE open).

    The last row read, or ZERO_ID when none. Exact for the cursor the page was read from: from
    the start (None, ``0-0``) the rows are every entry after ``0-0`` up to the page's end, so
    none means an empty stream and some means the newest is past ``0-0``; from a cursor the
    read is inclusive, so no row means nothing at or after it (the newest is before it; ZERO_ID
    is too, as a real cursor is past ``0-0``), the cursor's own row alone means it is the
    newest, and any other row is past the cursor, as the newest then is. Only for that cursor:
    a full page does not reach the newest entry, so another cursor may compare differently.
    """
    rows = replies[0]
    if not rows:
        return ZERO_ID
    raw = rows[-1][0]
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def first_page(run_id: str, cursor: str | None, replies: list[Any]) -> Page:
    """The first replay page from the replies of :func:`queue_first_page`'s commands: what
    ``read_range`` (no cursor) or ``read_from_cursor`` would have returned."""
    events = _decode(replies[0], run_id)
    if cursor is None or cursor == ZERO_ID:
        return None, events
    if events and events[0].id == cursor:
        return None, events[1:]
    head_rows = replies[1]
    head = None
    if head_rows:
        raw = head_rows[0][0]
        head = raw.decode() if isinstance(raw, bytes) else str(raw)
    return _with_gap(run_id, cursor, head, events)


__all__ = [
    "BACKOFF_MAX",
    "BACKOFF_MIN",
    "REDIS_DOWN",
    "ZERO_ID",
    "Page",
    "first_id",
    "first_page",
    "gap_event",
    "id_key",
    "normalize_cursor",
    "page_tip",
    "queue_first_page",
    "read_from_cursor",
    "read_range",
]
