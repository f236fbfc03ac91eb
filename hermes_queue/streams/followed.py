"""One stream a follower follows (``follower.py``), and the wire work of reading many at once:
an ``XREAD`` of several streams packed by hand, and its reply's entries handed to each stream's
sink, in order and once.

Packed by hand because the follower sends one such command per slot on every read: its head
and every stream's key are encoded once, when followed, not on each send."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from hermes_queue.events import RunEvent
from hermes_queue.streams.codec import decode_flat

log = logging.getLogger(__name__)


class Sink(Protocol):
    """Where the entries of one followed stream go."""

    def deliver(self, event: RunEvent) -> None:
        """The stream's next entry: every entry after the cursor it was followed from, in
        order, once."""

    def undecodable(self) -> None:
        """The stream's next entry cannot be decoded. The follower does not skip it (the
        stream stays the truth), so the sink is expected to stop following the stream."""


def bulk(value: bytes) -> bytes:
    """One RESP bulk string."""
    return b"$%d\r\n%s\r\n" % (len(value), value)


class Followed:
    """One followed stream: how far it has been read, and where its entries go."""

    __slots__ = ("cursor", "packed_key", "run_id", "seq", "sink")

    def __init__(self, key: str, run_id: str, cursor: str, seq: int | None, sink: Sink) -> None:
        self.packed_key = bulk(key.encode())  # as it goes into every XREAD
        self.run_id = run_id
        self.cursor = cursor  # last id read
        self.seq = seq  # that entry's seq (None: unknown): the next published one must follow it
        self.sink = sink


def xread_head(count: int) -> bytes:
    """``XREAD COUNT n STREAMS`` in RESP, without the array header: what every read starts with."""
    return b"".join(bulk(str(arg).encode()) for arg in ("XREAD", "COUNT", count, "STREAMS"))


def pack_xread(head: bytes, streams: Iterable[Followed]) -> bytes:
    """``XREAD COUNT n STREAMS <keys…> <cursors…>`` in RESP (``head``: ``xread_head``)."""
    reading = list(streams)
    parts = [b"*%d\r\n" % (4 + 2 * len(reading)), head]
    parts += [s.packed_key for s in reading]
    parts += [bulk(s.cursor.encode()) for s in reading]
    return b"".join(parts)


def dispatch(
    reading: Mapping[str, Followed], reply: Any, followed: Mapping[str, Followed]
) -> dict[str, int]:
    """Hand the entries of an XREAD of ``reading`` to their sinks, unless a stream is no longer
    the one ``followed`` holds (unfollowed, or unfollowed and followed again, while it was
    read); entries read per stream."""
    counts: dict[str, int] = {}
    if not reply:
        return counts  # nothing new
    for raw_key, entries in reply.items() if isinstance(reply, dict) else reply:
        key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
        stream = reading.get(key)
        if stream is None or followed.get(key) is not stream:
            continue
        counts[key] = len(entries)
        for raw_id, flat in entries:
            try:
                event = decode_flat(stream.run_id, raw_id, flat)
            except (ValueError, TypeError):
                # A malformed entry must not kill the reader for every run.
                log.exception("undecodable entry %r in %s", raw_id, key)
                stream.sink.undecodable()
                break
            stream.cursor, stream.seq = event.id, event.seq
            stream.sink.deliver(event)
    return counts
