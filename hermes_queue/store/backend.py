"""The seam between the shared SQL operations and a driver: what a backend must supply.

The two dialects differ in drivers, placeholders (``?`` vs ``$n``), error types and locking,
not in queries. So the operations (``sessions.py``, ``messages.py``, ``lineage.py``,
``responses.py``) are written once with ``?`` placeholders against the tiny ``Conn`` interface
defined here, and each backend (``sqlite.py``, ``postgres.py``) only fills in ``SqlBackend``'s
blanks: connections and transactions (``_read`` / ``_write``), its dialect and row-lock clause,
and its driver's errors translated into ``UniqueViolation`` / ``StoreUnavailable``. Kept apart
so every operation module depends on this contract, never on a driver.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, Literal, Protocol

from hermes_queue.store.base import StoreError

# The SQL a backend speaks; migrations and a few queries differ by it.
Dialect = Literal["sqlite", "postgres"]


class UniqueViolation(StoreError):
    """A backend-neutral unique-constraint failure; ``str()`` names the constraint or column."""


class Conn(Protocol):
    """The four calls the shared operations need; SQL uses ``?`` placeholders."""

    async def fetch(self, sql: str, *args: Any) -> list[dict[str, Any]]: ...

    async def fetchrow(self, sql: str, *args: Any) -> dict[str, Any] | None: ...

    async def execute(self, sql: str, *args: Any) -> int:
        """Run one statement; returns the number of rows it changed."""
        ...

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...


class SqlBackend(ABC):
    """What the operation mixins need from a backend: a ``Conn`` for a read or a write.

    ``_write()`` must yield a connection inside one transaction that holds whatever lock makes
    check-then-insert atomic; ``_read()`` a connection with autocommit reads.
    """

    dialect: ClassVar[Dialect]
    # Row lock for read-modify-write inside a transaction (empty where the transaction
    # already holds the database write lock, as SQLite's BEGIN IMMEDIATE does).
    for_update: ClassVar[str] = ""

    @abstractmethod
    def _read(self) -> AbstractAsyncContextManager[Conn]: ...

    @abstractmethod
    def _write(self) -> AbstractAsyncContextManager[Conn]: ...

    @abstractmethod
    async def close(self) -> None: ...
