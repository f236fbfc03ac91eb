"""PostgreSQL backend (several hosts share one database): asyncpg with a connection pool.

Atomicity comes from the database, not from this process: check-then-insert relies on
``ON CONFLICT (id) DO NOTHING`` (a concurrent insert of the same id waits for the first to
commit, then inserts nothing), read-modify-write takes ``SELECT ... FOR UPDATE`` row locks, and
migrations take an advisory lock. ``schema`` sets the pool's ``search_path`` so tests (or
tenants) can live side by side in one database.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import asyncpg

from hermes_queue.store.backend import Conn, Dialect, UniqueViolation
from hermes_queue.store.base import StoreError, StoreUnavailable
from hermes_queue.store.sql_store import SqlSessionStore

# Lower-case identifiers only, so the name needs no quoting anywhere (search_path included).
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# Driver errors that mean the server is unreachable, gone, or refusing work right now.
_UNAVAILABLE = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.InvalidAuthorizationSpecificationError,
    asyncpg.exceptions.InvalidCatalogNameError,
)


def _translate(exc: Exception) -> StoreError:
    if isinstance(exc, asyncpg.UniqueViolationError):
        return UniqueViolation(f"{exc.constraint_name or ''}: {exc}")
    if isinstance(exc, _UNAVAILABLE):
        return StoreUnavailable(f"postgres unavailable: {type(exc).__name__}: {exc}")
    return StoreError(f"postgres error: {type(exc).__name__}: {exc}")


@asynccontextmanager
async def _translated() -> AsyncIterator[None]:
    try:
        yield
    except (asyncpg.PostgresError, *_UNAVAILABLE) as exc:
        raise _translate(exc) from exc


@functools.lru_cache(maxsize=256)
def _numbered(sql: str) -> str:
    """``?`` → ``$1, $2, …`` (the shared SQL never has a literal ``?``)."""
    counter = iter(range(1, sql.count("?") + 1))
    return re.sub(r"\?", lambda _m: f"${next(counter)}", sql)


class _PgConn:
    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def fetch(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        async with _translated():
            return [dict(r) for r in await self._conn.fetch(_numbered(sql), *args)]

    async def fetchrow(self, sql: str, *args: Any) -> dict[str, Any] | None:
        async with _translated():
            row = await self._conn.fetchrow(_numbered(sql), *args)
        return dict(row) if row is not None else None

    async def execute(self, sql: str, *args: Any) -> int:
        async with _translated():
            status: str = await self._conn.execute(_numbered(sql), *args)
        last = status.rsplit(" ", 1)[-1]
        return int(last) if last.isdigit() else 0

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        async with _translated():
            await self._conn.executemany(_numbered(sql), rows)


class PostgresSessionStore(SqlSessionStore):
    dialect: ClassVar[Dialect] = "postgres"
    for_update: ClassVar[str] = " FOR UPDATE"

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 5.0,
        command_timeout: float = 30.0,
    ) -> None:
        if schema is not None and not _SCHEMA_NAME.match(schema):
            raise ValueError(f"invalid schema name {schema!r}: use [a-z_][a-z0-9_]*")
        self.url = url
        self.schema = schema
        self._pool_options: dict[str, Any] = {
            "min_size": min_size,
            "max_size": max_size,
            "timeout": connect_timeout,
            "command_timeout": command_timeout,
        }
        if schema is not None:
            self._pool_options["server_settings"] = {"search_path": schema}
        self._pool: asyncpg.Pool | None = None
        self._pool_lock = asyncio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        # Never the URL: it may carry a password.
        return f"PostgresSessionStore(schema={self.schema!r})"

    async def _get_pool(self) -> asyncpg.Pool:
        """Create the pool on first use; a failed attempt is retried by the next call."""
        if self._pool is not None:
            return self._pool
        async with self._pool_lock:
            if self._closed:
                raise StoreUnavailable("session store is closed")
            if self._pool is None:
                async with _translated():
                    self._pool = await asyncpg.create_pool(self.url, **self._pool_options)
        return self._pool

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[Conn]:
        pool = await self._get_pool()
        async with _translated(), pool.acquire() as conn:
            yield _PgConn(conn)

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[Conn]:
        pool = await self._get_pool()
        async with _translated(), pool.acquire() as conn, conn.transaction():
            yield _PgConn(conn)

    async def migrate(self, target: int | None = None) -> list[int]:
        if self.schema is not None:
            # Own transaction: the migration lock is keyed on current_schema(), which is
            # NULL until the schema exists. A concurrent creator is harmless.
            try:
                async with self._write() as conn:
                    await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
            except UniqueViolation:
                pass
        return await super().migrate(target)

    async def close(self) -> None:
        async with self._pool_lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
