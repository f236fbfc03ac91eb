"""Short request/response reads of a run's event stream: catch-up pages and gap detection.

These go through the shared connection pool, never the hub's dedicated blocking connection, so
they are usable without a hub (non-streaming endpoints, tests). The hub uses them to replay
history before switching a subscriber to its live tail.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from hermes_queue.events import EventType, RunEvent, parse_stream_id
from hermes_queue.keys import Keys

ZERO_ID = "0-0"


def id_key(entry_id: str) -> tuple[int, int]:
    """Sort key of a stream id; ids from Redis are always valid, so a bad one is a bug."""
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
    return [RunEvent.from_entry(run_id, entry_id, fields) for entry_id, fields in rows]


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
    if head is not None and id_key(head) > id_key(cursor):
        return gap_event(run_id, head, cursor), events
    return None, events


__all__ = [
    "ZERO_ID",
    "first_id",
    "gap_event",
    "id_key",
    "normalize_cursor",
    "read_from_cursor",
    "read_range",
]
