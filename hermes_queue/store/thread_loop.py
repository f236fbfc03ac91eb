"""An event loop on a thread of its own, where the SQLite store runs each operation whole.

Why not aiosqlite (what the store used before): it hops to its thread and back for every
statement, cursor fetch and cursor close, each hop a cross-thread wake-up on both sides and a
turn of the caller's event loop. A turn's writes were ~15 such hops, and at a few hundred turns
a second they were a large part of a worker's CPU (docs/performance.md, "Design choices and
the A/B behind them"). Here a whole operation (its transaction, every statement in it) runs on
this thread in one go, so an operation costs one hop in and one hop out, and the caller's loop
never waits on the disk or on SQLite's write lock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class ThreadLoopClosed(RuntimeError):
    """The loop was stopped; nothing more runs on it."""


class ThreadLoop:
    """A daemon thread running an asyncio loop, started on first use; ``stop()`` ends it.

    ``run(coro)`` awaits ``coro`` on that thread from any loop (or directly when already on it).
    Every coroutine accepted before ``stop()`` runs before the loop stops; none is accepted after.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._guard = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    def on_thread(self) -> bool:
        return self._thread is not None and threading.get_ident() == self._thread.ident

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self.on_thread():
            return await coro
        return await asyncio.wrap_future(self._submit(coro))

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        with self._guard:  # so that nothing is scheduled after the stop below
            if self._stopped:
                coro.close()
                raise ThreadLoopClosed(f"{self.name} is stopped")
            loop = self._loop if self._loop is not None else self._start()
            return asyncio.run_coroutine_threadsafe(coro, loop)

    def _start(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=self._serve, args=(loop,), name=self.name, daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        return loop

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def stop(self, last: Coroutine[Any, Any, Any] | None = None) -> None:
        """Run ``last`` (after everything accepted before it), then end the thread."""
        with self._guard:
            if self._stopped:
                if last is not None:
                    last.close()
                return
            self._stopped = True
            loop, thread = self._loop, self._thread
            done = (
                asyncio.run_coroutine_threadsafe(last, loop)
                if last is not None and loop is not None
                else None
            )
        if last is not None and done is None:
            last.close()
        if loop is None or thread is None:
            return
        try:
            if done is not None:
                await asyncio.wrap_future(done)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            await asyncio.to_thread(thread.join, 10)
