"""The SQL session store: ``create_store(url)`` picks the backend from the URL scheme.

Backends are imported lazily, so a SQLite deployment never imports asyncpg and vice versa.

URLs:
- ``sqlite:///relative/path.db`` (relative to the working directory)
- ``sqlite:////abs/path.db``
- ``sqlite:///:memory:`` (private to the one store object; for tests)
- ``postgresql://user@host:5432/db`` or ``postgres://...``
"""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import urlsplit

from hermes_queue.config import StoreSettings
from hermes_queue.config.urls import STORE_EXPECTED, sqlite_path, store_url_problem
from hermes_queue.logs import mask_url
from hermes_queue.redisio.connect import on_this_host
from hermes_queue.store.base import (
    UNSET,
    InvalidTitle,
    MessageRow,
    SessionExists,
    SessionNotFound,
    SessionRow,
    StoreError,
    StoreUnavailable,
    TitleConflict,
    TurnUsage,
    project_message,
    project_session,
    sanitize_title,
)
from hermes_queue.store.protocol import SessionStore
from hermes_queue.store.responses import ResponseRow

__all__ = [
    "UNSET",
    "InvalidTitle",
    "MessageRow",
    "ResponseRow",
    "SessionExists",
    "SessionNotFound",
    "SessionRow",
    "SessionStore",
    "StoreError",
    "StoreUnavailable",
    "TitleConflict",
    "TurnUsage",
    "create_store",
    "open_store",
    "project_message",
    "project_session",
    "sanitize_title",
    "store_location",
]


def create_store(url: str, *, schema: str | None = None, create: bool = True) -> SessionStore:
    """Build (but do not connect or migrate) the store named by ``url``.

    ``schema`` (PostgreSQL only) isolates the tables in one schema via ``search_path``.
    ``create=False`` (probes): a missing SQLite file is an error, never created.
    Raises ValueError for an unsupported or malformed URL.
    """
    problem = store_url_problem(url)
    if problem is not None:
        # The masked URL: the message may reach a log or a terminal.
        raise ValueError(f"store URL {mask_url(url)!r} {problem}; expected {STORE_EXPECTED}")
    path = sqlite_path(url)
    if path is not None:
        if schema is not None:
            raise ValueError("schema is only supported by the postgresql store")
        from hermes_queue.store.sqlite import SqliteSessionStore

        return SqliteSessionStore(path, create=create)
    from hermes_queue.store.postgres import PostgresSessionStore

    return PostgresSessionStore(url, schema=schema)


def store_location(url: str, schema: str = "") -> str:
    """Where the store is, for probes and /health/detailed: a SQLite file's absolute path, or
    a PostgreSQL URL's host, port and database (never its user or password) and schema."""
    path = sqlite_path(url)
    if path is not None:
        return path if path == ":memory:" else str(Path(path).resolve())
    try:
        parts = urlsplit(url)
        host = parts.hostname or "localhost"
        where = f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"
    except ValueError:
        return "<unparseable URL>"
    return f"{where} (schema {schema})" if schema else where


def warn_if_store_is_per_host(store_url: str, redis_url: str) -> bool:
    """Warn (and say True) when the store is a SQLite file while Redis is on another host: the
    deployment then spans hosts, and a process on another host would write a session store of
    its own, so sessions and transcripts would differ by the replica that served them."""
    if not store_url.lower().startswith("sqlite:") or on_this_host(redis_url):
        return False
    logging.getLogger(__name__).warning(
        "store_url is a SQLite file but Redis is on another host: API replicas and workers on "
        "other hosts would each keep sessions of their own; use PostgreSQL "
        "(store_url = postgresql://...) when they run on several hosts"
    )
    return True


async def open_store(settings: StoreSettings, *, redis_url: str) -> SessionStore:
    """The store named by the settings, migrated when ``migrate_on_start`` is set; a SQLite
    store beside a Redis on another host is warned about (``redis_url``).

    A database that is down at start-up is not fatal: the store reconnects on use, and the
    endpoints that need it answer 503 ``session_db_unavailable`` meanwhile.
    """
    store = create_store(settings.url, schema=settings.schema or None)
    warn_if_store_is_per_host(settings.url, redis_url)
    if settings.migrate_on_start:
        try:
            await store.migrate()
        except StoreUnavailable as exc:
            logging.getLogger(__name__).error("session store unavailable at start-up: %s", exc)
    return store
