"""A thread of its own where the SQLite store runs each operation whole, with no event loop.

Why not aiosqlite (what the store used before): it hops to its thread and back for every
statement, cursor fetch and cursor close, each hop a cross-thread wake-up on both sides and a
turn of the caller's event loop. A turn's writes were ~15 such hops, and at a few hundred turns
a second they were a large part of a worker's CPU (docs/performance.md, "Design choices and
the A/B behind them"). Here a whole operation (its transaction, every statement in it) runs on
this thread in one go, so an operation costs one hop in and one hop out, and the caller's loop
never waits on the disk or on SQLite's write lock.

Why no event loop on this thread (what it ran before): handing a coroutine to another loop
(``run_coroutine_threadsafe``) writes to that loop's self-pipe with a socket ``send``, which
gives up the caller's GIL: behind a worker's 32 agent threads its event loop then waited for it
back on every store call; and each operation took a turn of the thread's loop, a task and two
chained futures. An operation's statements are plain ``sqlite3`` calls that never suspend, so
this thread takes each coroutine from a queue and drives it to its end itself (one ``send``),
and the answer goes back with the caller's loop's ``call_soon_threadsafe``: 301 → 222 µs of
CPU per read-and-write pair of operations (``get_session`` + ``append_messages``, uvloop). An
operation that suspends is a programming error here and fails with a clear message.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

# Queued after the last operation: the thread ends there.
_STOP = object()


class StoreThreadClosed(RuntimeError):
    """The thread was stopped; nothing more runs on it."""


class OperationSuspended(RuntimeError):
    """An operation awaited something that does not complete at once: it cannot run here."""


class _Job:
    __slots__ = ("coro", "future", "loop")

    def __init__(
        self,
        coro: Coroutine[Any, Any, Any],
        future: asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.coro = coro
        self.future = future
        self.loop = loop


class StoreThread:
    """A daemon thread, started on first use, that runs operations one at a time in the order
    they were handed in; ``stop()`` ends it.

    ``run(coro)`` awaits ``coro`` run on that thread, from any event loop (or runs it directly
    when already on the thread: an operation calling another). Every operation accepted before
    ``stop()`` runs before the thread ends; none is accepted after. One whose caller was
    cancelled before it started does not run."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._guard = threading.Lock()
        self._jobs: queue.SimpleQueue[_Job | object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def on_thread(self) -> bool:
        return self._thread is not None and threading.get_ident() == self._thread.ident

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self.on_thread():
            return await coro
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._guard:  # so that nothing is queued after the stop below
            if self._stopped or (self._thread is not None and not self._thread.is_alive()):
                coro.close()
                raise StoreThreadClosed(f"{self.name} is stopped")
            if self._thread is None:
                self._start()
            self._jobs.put(_Job(coro, future, loop))
        return await future

    def _start(self) -> None:
        thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
        self._thread = thread
        thread.start()

    def _serve(self) -> None:
        """Each job answered, whatever it does: a caller never waits on a thread that died."""
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            assert isinstance(job, _Job)
            if job.future.cancelled():  # its caller is gone and it has not started
                _close(job.coro)
                continue
            _answer(job, *_drive(job.coro))

    async def stop(self, last: Coroutine[Any, Any, Any] | None = None) -> None:
        """Run ``last`` (after everything accepted before it), then end the thread."""
        with self._guard:
            if self._stopped or self._thread is None or not self._thread.is_alive():
                self._stopped = True
                if last is not None:
                    last.close()
                return
            self._stopped = True
            thread = self._thread
            done: asyncio.Future[Any] | None = None
            if last is not None:
                loop = asyncio.get_running_loop()
                done = loop.create_future()
                self._jobs.put(_Job(last, done, loop))
            self._jobs.put(_STOP)
        try:
            if done is not None:
                await done
        finally:
            await asyncio.to_thread(thread.join, 10)


def _drive(coro: Coroutine[Any, Any, Any]) -> tuple[Any, BaseException | None]:
    """``coro`` run to its end on this thread: its result, or what it raised."""
    try:
        coro.send(None)
    except StopIteration as finished:
        return finished.value, None
    except BaseException as exc:
        return None, exc
    suspended = OperationSuspended(
        "a store operation awaited something that does not complete at once; operations on "
        "the store's thread must not suspend"
    )
    return None, _close(coro) or suspended


def _close(coro: Coroutine[Any, Any, Any]) -> BaseException | None:
    """Close a coroutine that will not be run on; what its cleanup raised, if anything."""
    try:
        coro.close()
    except BaseException as exc:  # its cleanup awaited again, or raised: the caller hears it
        return exc
    return None


def _answer(job: _Job, value: Any, error: BaseException | None) -> None:
    """Hand the outcome to the caller's loop (nothing if that loop is closed: no one waits)."""
    with contextlib.suppress(RuntimeError):
        job.loop.call_soon_threadsafe(_settle, job.future, value, error)


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled meanwhile
        return
    if isinstance(error, asyncio.CancelledError):
        future.cancel()
    elif error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
