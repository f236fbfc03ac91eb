"""SQLite backend (the default, embedded): one aiosqlite connection per store.

aiosqlite runs every call on its own thread, so nothing here blocks the event loop. A single
connection is shared by all coroutines of the process, so an ``asyncio.Lock`` serialises
transactions on it (otherwise one coroutine's statements would land inside another's
transaction). Writes use ``BEGIN IMMEDIATE``: the database write lock is taken up front, which
makes check-then-insert atomic against other *processes* too, with ``busy_timeout`` letting a
second writer wait instead of failing. WAL keeps readers in other processes unblocked.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any, ClassVar

import aiosqlite

from hermes_queue.store.backend import Conn, Dialect, UniqueViolation
from hermes_queue.store.base import StoreError, StoreUnavailable
from hermes_queue.store.sql_store import SqlSessionStore

MEMORY = ":memory:"
# Errors that mean "the database is not usable right now", not "your query is wrong".
_UNAVAILABLE_MARKERS = (
    "unable to open",
    "database is locked",
    "disk i/o error",
    "readonly",
    "no such file",
    "not a database",
)


def _translate(exc: Exception) -> StoreError:
    """Map a driver error to the store's errors (the caller raises it ``from exc``)."""
    message = str(exc)
    if isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in message:
        return UniqueViolation(message)
    if isinstance(exc, OSError) or any(m in message.lower() for m in _UNAVAILABLE_MARKERS):
        return StoreUnavailable(f"sqlite database unavailable: {message}")
    return StoreError(f"sqlite error: {message}")


@asynccontextmanager
async def _translated() -> AsyncIterator[None]:
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        raise _translate(exc) from exc


class _SqliteConn:
    """``Conn`` over an aiosqlite connection; SQL already uses ``?`` placeholders."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    async def fetch(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        async with _translated(), self._db.execute(sql, args) as cursor:
            return [dict(row) for row in await cursor.fetchall()]

    async def fetchrow(self, sql: str, *args: Any) -> dict[str, Any] | None:
        # fetchall, not fetchone: an INSERT ... RETURNING must run to completion.
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None

    async def execute(self, sql: str, *args: Any) -> int:
        async with _translated(), self._db.execute(sql, args) as cursor:
            return max(cursor.rowcount, 0)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        async with _translated():
            await self._db.executemany(sql, rows)


class SqliteSessionStore(SqlSessionStore):
    """Session store in one SQLite file (or ``:memory:``, private to this store)."""

    dialect: ClassVar[Dialect] = "sqlite"

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 5_000) -> None:
        self.path = str(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._db: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"SqliteSessionStore({self.path!r})"

    async def _connect(self) -> aiosqlite.Connection:
        """Open lazily (under ``_lock``) so constructing a store never touches the disk."""
        if self._closed:
            raise StoreUnavailable("session store is closed")
        if self._db is not None:
            return self._db
        async with _translated():
            if self.path != MEMORY:
                # The default URL points into a not-yet-existing ".hermes-queue/" directory.
                await asyncio.to_thread(Path(self.path).parent.mkdir, parents=True, exist_ok=True)
            # isolation_level=None: no implicit transactions, we issue BEGIN/COMMIT ourselves.
            db = await aiosqlite.connect(self.path, isolation_level=None)
            try:
                db.row_factory = aiosqlite.Row
                await db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
                await db.execute("PRAGMA foreign_keys = ON")
                if self.path != MEMORY:
                    await _enable_wal(db)
                    await db.execute("PRAGMA synchronous = NORMAL")
            except BaseException:
                await db.close()
                raise
        self._db = db
        return db

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[Conn]:
        async with self._lock:
            yield _SqliteConn(await self._connect())

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[Conn]:
        async with self._lock:
            db = await self._connect()
            async with _translated():
                await db.execute("BEGIN IMMEDIATE")
            try:
                yield _SqliteConn(db)
                async with _translated():
                    await db.execute("COMMIT")
            except BaseException:
                # Also after a failed COMMIT, which leaves the transaction open.
                with suppress(sqlite3.Error, ValueError):
                    await db.execute("ROLLBACK")
                raise

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            if self._db is not None:
                db, self._db = self._db, None
                await db.close()


async def _enable_wal(db: aiosqlite.Connection, attempts: int = 50) -> None:
    """Switch to WAL. The switch needs an exclusive lock and SQLite answers "database is
    locked" at once (no busy wait) while another connection is switching the same new file,
    so retry briefly: several processes open one fresh database at start-up."""
    for attempt in range(attempts):
        try:
            await db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == attempts - 1:
                raise
            await asyncio.sleep(0.01 * (attempt + 1))
