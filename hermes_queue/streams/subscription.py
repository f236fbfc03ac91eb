"""A subscriber's exactly-once, ordered view of one run stream, fed by the StreamHub.

Split from ``hub.py``: the hub owns the blocking XREAD and the set of followed streams; a
``Subscription`` owns one consumer's buffer, its replay from history and its overflow recovery.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.events import RunEvent
from hermes_queue.streams.reader import (
    ZERO_ID,
    Page,
    gap_event,
    id_key,
    read_from_cursor,
    read_range,
)

if TYPE_CHECKING:
    from hermes_queue.streams.hub import StreamHub

log = logging.getLogger(__name__)

_BACKOFF_MIN = 0.1
_BACKOFF_MAX = 2.0
_REDIS_DOWN = (RedisConnectionError, RedisTimeoutError, OSError)


class _Stream:
    """One followed stream. ``cursor`` None = not yet replayed by anyone, so not in the XREAD."""

    __slots__ = ("cursor", "key", "packed_key", "run_id", "seq", "start", "subs")

    def __init__(self, key: str, run_id: str) -> None:
        self.key = key
        self.packed_key = _bulk(key.encode())  # as it goes into every XREAD
        self.run_id = run_id
        self.cursor: str | None = None  # last id the hub read
        self.seq: int | None = None  # that entry's seq: the next published one must follow it
        self.start: str | None = None  # the cursor the hub started from
        self.subs: set[Subscription] = set()


def _bulk(value: bytes) -> bytes:
    """One RESP bulk string."""
    return b"$%d\r\n%s\r\n" % (len(value), value)


class Subscription:
    """One consumer's ordered, exactly-once view of a run's events (see module docstring)."""

    def __init__(
        self, hub: StreamHub, run_id: str, after: str | None, page: Page | None = None
    ) -> None:
        self._hub = hub
        self.run_id = run_id
        self._last = after  # last id handed out; None = fresh, nothing handed out yet
        self._last_key = None if after is None else id_key(after)
        # The seq of the event at _last when we handed it out (0: a fresh stream with nothing in
        # it yet; None: unknown, e.g. a client's cursor not yet met), so the hub can take the
        # next entry straight from its published message.
        self._last_seq: int | None = 0 if after is None else None
        self._queue: deque[RunEvent] = deque()  # live entries from the hub, bounded
        self._out: deque[RunEvent] = deque()  # ready to hand out (at most one page)
        self._wakeup = asyncio.Event()
        self._stream: _Stream | None = None  # set while attached to the hub
        self._need: str | None = None  # replay must reach this id before going live
        self._live = False
        self._first_page = True
        self._prefetched = page  # the first replay page, already read (StreamHub.prefetch)
        self._ending = False  # terminal event queued: no more reads
        self.finished = False  # terminal event delivered (or hub closed)
        self.overflows = 0  # times the hub detached us for being slow

    @property
    def last_id(self) -> str | None:
        return self._last

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> RunEvent:
        event = await self.get()
        if event is None:
            raise StopAsyncIteration
        return event

    async def get(self, timeout: float | None = None) -> RunEvent | None:  # noqa: ASYNC109
        """Next event, or None after ``timeout`` (send a keepalive) or once ``finished``.

        A timeout argument rather than ``asyncio.timeout`` because the SSE handler needs "quiet
        for N s" as a value (to send a keepalive), and it only ever cuts an idle wait short.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        backoff = _BACKOFF_MIN
        while True:
            self._wakeup.clear()
            if self._out:
                event = self._out.popleft()
                self.finished = event.terminal
                return event
            if self._ending or self._hub.closed:
                self.finished = True
                return None
            if not self._live:
                try:
                    await self._replay_page()
                except _REDIS_DOWN as exc:
                    # Redis is away: wait (within the caller's timeout) and retry the page.
                    log.warning("stream replay of run %s failed: %r", self.run_id, exc)
                    pause = backoff if deadline is None else min(backoff, deadline - loop.time())
                    if pause <= 0:
                        return None
                    await asyncio.sleep(pause)
                    backoff = min(backoff * 2, _BACKOFF_MAX)
                continue
            self._take_live()
            if self._out:
                continue
            if self._stream is None:  # detached for overflow and drained: replay from _last
                self._live = False
                continue
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return None
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation.
                async with asyncio.timeout(remaining):
                    await self._wakeup.wait()
            except TimeoutError:
                return None

    async def get_many(
        self,
        timeout: float | None = None,  # noqa: ASYNC109
        max_items: int = 256,
    ) -> list[RunEvent]:
        """The next event (waiting as :meth:`get` does) plus every event already at hand.

        Never waits for more than the first event and never reads Redis for the extra ones:
        it only takes what is buffered (the rest of a replay page, live entries the hub has
        fanned out). Same contract as :meth:`get` — in order, exactly once, nothing after the
        terminal event — so a batch is a contiguous run of the sequence. ``[]`` means what
        ``None`` means for :meth:`get`: the timeout passed, or the subscription is finished.
        """
        first = await self.get(timeout)
        if first is None:
            return []
        batch = [first]
        while len(batch) < max_items and not self.finished:
            event = self._pop_ready()
            if event is None:
                break
            batch.append(event)
        return batch

    def _pop_ready(self) -> RunEvent | None:
        """The next event that needs no waiting and no Redis read, else None."""
        if not self._out:
            if not self._live or self._ending or self._hub.closed:
                return None
            self._take_live()
            if not self._out:
                return None
        event = self._out.popleft()
        self.finished = event.terminal
        return event

    def _take_live(self) -> None:
        """Move buffered live entries to ``_out`` until one is new (dropping replayed ones)."""
        queue, out = self._queue, self._out
        while queue and not out:
            event = queue.popleft()
            if self._last_key is None or id_key(event.id) > self._last_key:
                self._hand_out(event)

    def _hand_out(self, event: RunEvent) -> None:
        if self._ending:
            return
        if self._last is None and event.seq != 1:  # fresh, but the run's start is gone
            self._out.append(gap_event(self.run_id, event.id, ZERO_ID))
        self._last = event.id
        self._last_key = id_key(event.id)
        self._last_seq = event.seq or None
        self._out.append(event)
        if event.terminal:
            self._ending = True
            self._hub._detach(self)

    async def _replay_page(self) -> None:
        """Replay one XRANGE page after ``_last``; go live once replay meets the hub's cursor."""
        hub = self._hub
        if self._stream is None:
            # Attach first: whatever the hub reads from now on is buffered, so nothing written
            # between our last XRANGE and the switch to live can fall through.
            self._queue.clear()
            self._need = hub._attach(self).cursor
            self._first_page = True
        gap = None
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None:
            # Read before we attached: as good as reading it now, because going live below
            # still needs the replay to reach what the hub had read when we attached.
            gap, events = prefetched
        else:
            gap, events = await self._read_page()
        self._first_page = False
        if gap is not None:
            self._out.append(gap)
        for event in events:
            self._hand_out(event)
        stream = self._stream
        if len(events) >= hub.count or self._ending or stream is None:
            return  # more history, done, or detached meanwhile (next call re-attaches)
        last = self._last or ZERO_ID
        if self._need is None:
            if stream.start is None:
                hub._activate(stream, last, self._last_seq)
            self._need = stream.start
        # The hub delivered us everything after _need; replay must have reached it.
        if self._need is not None and id_key(last) >= id_key(self._need):
            self._live = True

    async def _read_page(self) -> Page:
        hub = self._hub
        gap = None
        async with hub._replay_slots:
            if self._first_page and self._last is not None:
                gap, events = await read_from_cursor(
                    hub.redis, hub.keys, self.run_id, self._last, hub.count
                )
            else:
                events = await read_range(hub.redis, hub.keys, self.run_id, self._last, hub.count)
        return gap, events

    def _offer(self, event: RunEvent, limit: int) -> bool:
        """Buffer a live event; False (caller detaches us) when the buffer is full."""
        if len(self._queue) >= limit:
            return False
        self._queue.append(event)
        self._wakeup.set()
        return True
