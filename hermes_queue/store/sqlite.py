"""SQLite backend (the default, embedded): one connection per store, on a thread of its own.

Every operation runs whole on the store's thread (``store_thread.py``): its statements are
plain ``sqlite3`` calls there, so an operation is one hop from the caller's loop and back, and
the caller's loop never blocks on the disk or on the write lock. The connection is shared by
all of the process's operations; that thread runs them one at a time, each to its end, so one
operation's statements never enter another's transaction. Writes use ``BEGIN IMMEDIATE``: the
database write lock is taken up front, which makes check-then-insert atomic against other
*processes* too, with ``busy_timeout`` letting a second writer wait (on the store's thread)
instead of failing. WAL keeps readers in other processes unblocked.
"""

from __future__ import annotations

import functools
import inspect
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from hermes_queue.store.backend import Conn, Dialect, UniqueViolation
from hermes_queue.store.base import StoreError, StoreUnavailable
from hermes_queue.store.sql_store import SqlSessionStore
from hermes_queue.store.store_thread import StoreThread, StoreThreadClosed

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


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        raise _translate(exc) from exc


class _SqliteConn:
    """``Conn`` over a ``sqlite3`` connection, called on the store's thread only; SQL already
    uses ``?`` placeholders. The calls are coroutines for the shared operations' sake, but
    never suspend: an operation runs to its end without giving up the store's thread."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    async def fetch(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        with _translated():
            return [dict(row) for row in self._db.execute(sql, args).fetchall()]

    async def fetchrow(self, sql: str, *args: Any) -> dict[str, Any] | None:
        # fetchall, not fetchone: an INSERT ... RETURNING must run to completion.
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None

    async def execute(self, sql: str, *args: Any) -> int:
        with _translated():
            cursor = self._db.execute(sql, args)
            rowcount = cursor.rowcount
            cursor.close()
            return max(rowcount, 0)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with _translated():
            self._db.executemany(sql, rows)


class SqliteSessionStore(SqlSessionStore):
    """Session store in one SQLite file (or ``:memory:``, private to this store).

    Every public operation runs on the store's thread (``_on_store_thread`` below); the
    connection and the transactions live there."""

    dialect: ClassVar[Dialect] = "sqlite"

    def __init__(
        self, path: str | Path, *, busy_timeout_ms: int = 5_000, create: bool = True
    ) -> None:
        self.path = str(path)
        self._busy_timeout_ms = busy_timeout_ms
        # create=False: a missing file is an error, never created (SQLite's mode=rw), for
        # probes (``hermes-queue check``) that must not leave a new, empty store behind a
        # mistyped path. Read-write all the same: as the last connection it removes the
        # -wal and -shm files it opened, where a read-only one would leave them behind.
        self.create = create
        self._db: sqlite3.Connection | None = None
        # Once stopped (close), it refuses every operation: a closed store is unavailable.
        self._thread = StoreThread("hermes-queue-sqlite")

    def __repr__(self) -> str:
        return f"SqliteSessionStore({self.path!r})"

    async def _connect(self) -> sqlite3.Connection:
        """Open lazily (on the store's thread) so constructing a store never touches the disk. A
        missing directory is an error, never created here: a mistyped path must not become a
        new, empty session store (``hermes-queue dev`` and the default ``store_url`` create
        their own directory, ``cli/preflight.py``)."""
        if self._db is not None:
            return self._db
        with _translated():
            db = _open(self.path, self.create)
            try:
                db.row_factory = sqlite3.Row
                db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
                db.execute("PRAGMA foreign_keys = ON")
                if self.path != MEMORY and self.create:
                    _enable_wal(db)
                    db.execute("PRAGMA synchronous = NORMAL")
            except BaseException:
                db.close()
                raise
        self._db = db
        return db

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[Conn]:
        yield _SqliteConn(await self._connect())

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[Conn]:
        db = await self._connect()
        with _translated():
            db.execute("BEGIN IMMEDIATE")
        try:
            yield _SqliteConn(db)
            with _translated():
                db.execute("COMMIT")
        except BaseException:
            # Also after a failed COMMIT, which leaves the transaction open.
            with suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise

    async def close(self) -> None:
        await self._thread.stop(last=self._close_db())

    async def _close_db(self) -> None:
        """The store thread's last operation: everything accepted before ``close`` ran first."""
        if self._db is not None:
            db, self._db = self._db, None
            db.close()


T = TypeVar("T")


def _open(path: str, create: bool) -> sqlite3.Connection:
    """The connection (on the store's thread: blocking is fine here). A missing directory is
    refused, never created; a missing file too unless ``create``."""
    if path != MEMORY and not Path(path).parent.is_dir():
        directory = Path(path).parent
        raise StoreUnavailable(f"sqlite database unavailable: directory {directory} does not exist")
    # isolation_level=None: no implicit transactions, we issue BEGIN/COMMIT ourselves.
    if not create and path != MEMORY:
        uri = f"{Path(path).resolve().as_uri()}?mode=rw"
        return sqlite3.connect(uri, isolation_level=None, uri=True)
    return sqlite3.connect(path, isolation_level=None)


def _on_store_thread(
    operation: Callable[..., Coroutine[Any, Any, T]],
) -> Callable[..., Coroutine[Any, Any, T]]:
    @functools.wraps(operation)
    async def run(self: SqliteSessionStore, *args: Any, **kwargs: Any) -> T:
        try:
            return await self._thread.run(operation(self, *args, **kwargs))
        except StoreThreadClosed:
            raise StoreUnavailable("session store is closed") from None

    return run


# Every public operation of the shared SQL store, wrapped once here (the operation modules stay
# backend-neutral; PostgreSQL's asyncpg runs them on the caller's loop as they are).
for _name, _operation in inspect.getmembers(SqlSessionStore, inspect.iscoroutinefunction):
    if not _name.startswith("_") and _name != "close":
        setattr(SqliteSessionStore, _name, _on_store_thread(_operation))


def _enable_wal(db: sqlite3.Connection, attempts: int = 50) -> None:
    """Switch to WAL. The switch needs an exclusive lock and SQLite answers "database is
    locked" at once (no busy wait) while another connection is switching the same new file,
    so retry briefly: several processes open one fresh database at start-up."""
    for attempt in range(attempts):
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(0.01 * (attempt + 1))  # on the store's thread: nothing else waits
