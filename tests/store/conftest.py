"""Fixtures for the store contract suite: every test runs once per backend.

PostgreSQL tests need ``HERMES_QUEUE_TEST_POSTGRES_URL``. Without it they are skipped with a
reason, except under ``CI`` (any value), where a missing database must fail the build rather
than silently shrink the suite. Each PostgreSQL test gets its own fresh schema, created before
and dropped (CASCADE) after, so tests never see each other's rows and nothing is truncated.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import pytest

from hermes_queue.store import SessionStore, create_store
from tests.conftest import postgres_url

StoreFactory = Callable[[], SessionStore]


async def old_session(store: SessionStore, id: str, title: str | None = None) -> None:
    """A session row as a database at an old schema version holds it (the columns of
    version 1), written by hand: today's code writes today's columns."""

    async def insert() -> None:
        async with store._write() as conn:  # type: ignore[attr-defined]
            await conn.execute(
                "INSERT INTO sessions (id, source, started_at, title)"
                " VALUES (?, 'api_server', ?, ?)",
                id,
                time.time(),
                title,
            )

    thread = getattr(store, "_thread", None)  # SQLite's operations run on its own thread
    await (thread.run(insert()) if thread is not None else insert())


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def store_factory(backend: str, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """Makes unmigrated stores that all point at this test's one (empty) database.

    Several store objects on one database stand in for several processes or hosts.
    """
    made: list[SessionStore] = []
    schema: str | None = None
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        url = postgres_url()
        schema = f"t_{uuid.uuid4().hex}"
        admin = await asyncpg.connect(url)
        try:
            await admin.execute(f"CREATE SCHEMA {schema}")
        finally:
            await admin.close()

    def make() -> SessionStore:
        store = create_store(url, schema=schema)
        made.append(store)
        return store

    try:
        yield make
    finally:
        for store in made:
            await store.close()
        if schema is not None:
            admin = await asyncpg.connect(url)
            try:
                await admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            finally:
                await admin.close()


@pytest.fixture
async def store(store_factory: StoreFactory) -> SessionStore:
    """A migrated store on a fresh database."""
    store = store_factory()
    await store.migrate()
    return store
