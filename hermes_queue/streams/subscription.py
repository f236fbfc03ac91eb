"""A subscriber's exactly-once, ordered view of one run stream, fed by the StreamHub.

A ``Subscription`` owns one consumer's side: its replay of history, the hand-over from replay
to the live entries without a hole or a duplicate, the ``stream.gap`` event, and recovery once
the hub drops it for being slow. It sees the hub only through the two protocols below, which
``StreamHub`` implements: :class:`Hub` (attach, read a replay page) and :class:`Tap` (one
attachment's buffer of live entries). The hub owns which stream is followed from where and how
it is read (published entries, ``XREAD`` only to fill gaps: see ``follower.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

from hermes_queue.events import RunEvent
from hermes_queue.streams.reader import (
    BACKOFF_MAX,
    BACKOFF_MIN,
    REDIS_DOWN,
    ZERO_ID,
    Page,
    gap_event,
    id_key,
)

log = logging.getLogger(__name__)


class Tap(Protocol):
    """One attachment to the hub's live tail of a run's stream.

    While attached, every entry the hub reads after its start point is buffered here, in
    order; the hub detaches it when the buffer is full (``overflowed``) or the stream holds an
    entry that cannot be decoded. What is buffered can still be taken after that.
    """

    @property
    def attached(self) -> bool: ...

    @property
    def overflowed(self) -> bool: ...

    def __len__(self) -> int:
        """Entries buffered, not yet taken."""

    def pop(self) -> RunEvent | None:
        """The oldest buffered entry, None when there is none."""

    def caught_up(self, last: str, seq: int | None) -> bool:
        """A replay has reached ``last`` (the entry numbered ``seq``, when known): True when
        the tap has every entry after it. Follows the stream from ``last`` if nobody does yet,
        so call it only once a replay page came back short (the end of the stream as read),
        and only while attached."""

    def detach(self) -> None:
        """No more entries; the hub stops reading a stream nobody is attached to."""


class Hub(Protocol):
    """What a subscription needs from the hub that feeds it."""

    @property
    def closed(self) -> bool: ...

    @property
    def page_size(self) -> int:
        """Entries per replay page at most."""

    def attach(self, run_id: str, wake: Callable[[], None]) -> Tap:
        """A new tap on ``run_id``'s stream, buffering from now on; ``wake`` is called when an
        entry is buffered or the hub detaches the tap (or closes)."""

    async def read_history(self, run_id: str, after: str | None, *, first: bool) -> Page:
        """One replay page after ``after`` (None: from the start); ``first``: check whether
        ``after`` fell off the stream, and start the page with a gap event if so."""


class Subscription:
    """One consumer's ordered, exactly-once view of a run's events (see module docstring)."""

    def __init__(self, hub: Hub, run_id: str, after: str | None, page: Page | None = None) -> None:
        self._hub = hub
        self.run_id = run_id
        self._last = after  # last id handed out; None = fresh, nothing handed out yet
        self._last_key = None if after is None else id_key(after)
        # The seq of the event at _last when we handed it out (0: a fresh stream with nothing in
        # it yet; None: unknown, e.g. a client's cursor not yet met), so the hub can take the
        # next entry straight from its published message.
        self._last_seq: int | None = 0 if after is None else None
        self._out: deque[RunEvent] = deque()  # ready to hand out (at most one page)
        self._wakeup = asyncio.Event()
        self._tap: Tap | None = None  # attached as replay starts; replaced once the hub drops it
        self._live = False
        self._first_page = True
        self._prefetched = page  # the first replay page, already read (StreamHub.prefetch)
        self._ending = False  # terminal event queued: no more reads
        self.finished = False  # terminal event delivered (or hub closed)
        self.ended = False  # the run's terminal event delivered: the run is over
        self._overflows = 0  # of the taps before the current one

    @property
    def last_id(self) -> str | None:
        return self._last

    @property
    def overflows(self) -> int:
        """Times the hub detached us for being slow (each time, we replayed from our last id)."""
        tap = self._tap
        return self._overflows + (tap is not None and tap.overflowed)

    @property
    def buffered(self) -> int:
        """Live entries the hub has buffered for us and we have not taken yet."""
        return 0 if self._tap is None else len(self._tap)

    def close(self) -> None:
        """Stop taking live entries (the hub's ``subscribe`` does this on exit)."""
        if self._tap is not None:
            self._tap.detach()

    def abandon(self) -> None:
        """The consumer is gone (its client closed the connection): nothing more is handed
        out, and a waiting :meth:`get` returns at once (``finished``, no event)."""
        self._out.clear()
        self._ending = True
        self.close()
        self._wakeup.set()

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
        backoff = BACKOFF_MIN
        while True:
            self._wakeup.clear()
            if self._out:
                event = self._out.popleft()
                self.finished = self.ended = event.terminal
                return event
            if self._ending or self._hub.closed:
                self.finished = True
                return None
            if not self._live:
                try:
                    await self._replay_page()
                except REDIS_DOWN as exc:
                    # Redis is away: wait (within the caller's timeout) and retry the page.
                    log.warning("stream replay of run %s failed: %r", self.run_id, exc)
                    pause = backoff if deadline is None else min(backoff, deadline - loop.time())
                    if pause <= 0:
                        return None
                    await asyncio.sleep(pause)
                    backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            self._take_live()
            if self._out:
                continue
            if self._tap is None or not self._tap.attached:  # dropped and drained: replay
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
        self.finished = self.ended = event.terminal
        return event

    def _take_live(self) -> None:
        """Move live entries from the tap to ``_out`` until one is new (dropping replayed ones)."""
        tap, out = self._tap, self._out
        while tap is not None and not out and (event := tap.pop()) is not None:
            if self._last_key is None or id_key(event.id) > self._last_key:
                self._hand_out(event)

    def _hand_out(self, event: RunEvent) -> None:
        if self._ending:
            return
        if self._last is None and event.seq != 1:  # fresh, but the run's start is gone
            self._out.append(gap_event(self.run_id, event.id, ZERO_ID))
        elif self._last_seq is not None and 0 < event.seq <= self._last_seq:
            # Numbered like one handed out: Redis lost entries (a failover) and the run went on.
            self._out.append(gap_event(self.run_id, event.id, self._last or ZERO_ID))
        self._last = event.id
        self._last_key = id_key(event.id)
        self._last_seq = event.seq or None
        self._out.append(event)
        if event.terminal:
            self._ending = True
            self.close()

    async def _replay_page(self) -> None:
        """Replay one page after ``_last``; go live once replay meets what the tap has."""
        tap = self._tap
        if tap is None or not tap.attached:
            if tap is not None:
                self._overflows += tap.overflowed
            # Attach first: whatever the hub reads from now on is buffered, so nothing written
            # between our last page and the switch to live can fall through.
            tap = self._tap = self._hub.attach(self.run_id, self._wakeup.set)
            self._first_page = True
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None:
            # Read before we attached: as good as reading it now, because going live below
            # still needs the replay to reach what the hub had read when we attached.
            gap, events = prefetched
        else:
            gap, events = await self._hub.read_history(
                self.run_id, self._last, first=self._first_page
            )
        self._first_page = False
        if gap is not None:
            self._out.append(gap)
        for event in events:
            self._hand_out(event)
        if len(events) >= self._hub.page_size or self._ending or not tap.attached:
            return  # more history, done, or detached meanwhile (next call re-attaches)
        if tap.caught_up(self._last or ZERO_ID, self._last_seq):
            self._live = True
