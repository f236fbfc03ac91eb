"""The SQLite store runs every operation on a thread of its own (store/store_thread.py): the
caller's loop stays free while SQLite waits, a shutdown finishes what it accepted, and the
thread goes away with the store. The thread drives each operation to its end with no event loop:
one that suspends fails clearly, and one whose caller gave up before it started never runs."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from hermes_queue.store import StoreUnavailable, create_store
from hermes_queue.store.sqlite import SqliteSessionStore
from hermes_queue.store.store_thread import OperationSuspended, StoreThread


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def store_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "hermes-queue-sqlite")


@pytest.fixture
async def store(tmp_path: Path) -> SqliteSessionStore:
    made = create_store(f"sqlite:///{tmp_path / 'store.db'}")
    assert isinstance(made, SqliteSessionStore)
    await made.migrate()
    return made


async def test_a_write_waiting_for_the_lock_leaves_the_loop_free(
    store: SqliteSessionStore,
) -> None:
    """Another process holds SQLite's write lock: the write waits on the store's thread while
    the caller's loop keeps serving, and goes through once the lock is released."""
    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        write = asyncio.create_task(store.create_session("s"))
        for _ in range(200):  # the loop keeps turning while the write is parked on the lock
            await asyncio.sleep(0.001)
        assert not write.done()
    finally:
        other.execute("COMMIT")
        other.close()
    row = await asyncio.wait_for(write, 10)
    assert row.id == "s"
    await store.close()


async def test_close_finishes_every_write_it_accepted(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = create_store(f"sqlite:///{path}")
    await store.migrate()
    await store.create_session("s")
    writes = [
        asyncio.ensure_future(store.append_messages("s", [user(f"m{i}")], turn_key=f"t{i}"))
        for i in range(20)
    ]
    await asyncio.sleep(0)  # the writes are submitted; close comes after them
    await store.close()
    assert await asyncio.gather(*writes) == [1] * 20
    with pytest.raises(StoreUnavailable):
        await store.append_messages("s", [user("late")])

    reopened = create_store(f"sqlite:///{path}")
    try:
        assert [m["content"] for m in await reopened.get_conversation("s")] == [
            f"m{i}" for i in range(20)
        ]
    finally:
        await reopened.close()


async def test_the_thread_starts_on_first_use_and_ends_with_close(tmp_path: Path) -> None:
    before = store_threads()
    store = create_store(f"sqlite:///{tmp_path / 'store.db'}")
    assert store_threads() == before  # constructing a store starts nothing
    await store.migrate()
    assert store_threads() == before + 1
    await store.close()
    await store.close()  # twice is fine
    assert store_threads() == before


def test_one_store_serves_callers_on_different_loops(tmp_path: Path) -> None:
    """A store made on one loop answers coroutines of another (e.g. a CLI helper thread)."""
    store = create_store(f"sqlite:///{tmp_path / 'store.db'}")

    async def first() -> None:
        await store.migrate()
        await store.create_session("s")

    async def second() -> int:
        return await store.append_messages("s", [user("hi")])

    asyncio.run(first())
    assert asyncio.run(second()) == 1
    asyncio.run(store.close())


class _Suspends:
    """An awaitable that does not complete at once (as any real I/O wait would)."""

    def __await__(self):  # type: ignore[no-untyped-def]
        yield


async def test_an_operation_that_suspends_fails_and_the_thread_serves_on() -> None:
    thread = StoreThread("test-store-thread")

    async def suspends() -> int:
        await _Suspends()
        return 1

    async def answers() -> int:
        return 42

    try:
        with pytest.raises(OperationSuspended):
            await thread.run(suspends())
        assert await thread.run(answers()) == 42
    finally:
        await thread.stop()


async def test_an_operation_whose_caller_gave_up_before_it_started_never_runs() -> None:
    """Operations run in the order handed in; one whose caller was cancelled while it waited
    its turn is dropped (a write nobody waits for, and that did not start, is not made)."""
    thread = StoreThread("test-store-thread")
    release = threading.Event()
    ran: list[str] = []

    async def blocks() -> None:
        release.wait(10)  # holds the thread, as SQLite's busy wait would
        ran.append("first")

    async def records(name: str) -> None:
        ran.append(name)

    try:
        first = asyncio.ensure_future(thread.run(blocks()))
        abandoned = asyncio.ensure_future(thread.run(records("abandoned")))
        await asyncio.sleep(0)  # both handed in: each task ran to its await
        abandoned.cancel()
        await asyncio.gather(abandoned, return_exceptions=True)
        release.set()
        await first
        await thread.run(records("next"))  # after the abandoned one, in order
        assert ran == ["first", "next"]
    finally:
        release.set()
        await thread.stop()
    assert not thread.on_thread()


async def test_an_operation_whose_cleanup_awaits_again_is_answered_and_the_thread_serves_on() -> (
    None
):
    """A suspended operation is closed; one whose cleanup awaits once more (or raises) makes
    that close fail: its caller hears the failure and the thread stays up for the next."""
    thread = StoreThread("test-store-thread")

    async def stubborn() -> int:
        try:
            await _Suspends()
        finally:
            await _Suspends()  # cleanup that suspends again: close() raises RuntimeError
        return 1

    async def answers() -> int:
        return 42

    try:
        with pytest.raises(RuntimeError):
            await asyncio.wait_for(thread.run(stubborn()), 10)
        assert await asyncio.wait_for(thread.run(answers()), 10) == 42
    finally:
        await thread.stop()
