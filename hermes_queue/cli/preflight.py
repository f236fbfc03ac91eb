"""What a process checks before it starts, beyond the settings' own validation: the Redis URL
parses as the clients will parse it, and a SQLite store's directory exists.

A mistyped SQLite path must not become a new, empty session store (every session would seem
lost, and nothing would say why): a missing directory is a configuration error. One directory
is created on purpose: the default ``store_url``'s (``.hermes-queue/`` in the working
directory), hermes-queue's own data directory, which ``hermes-queue dev`` and a first
``hermes-queue api`` use.
"""

from __future__ import annotations

from pathlib import Path

from hermes_queue.config import RedisSettings, Settings, StoreSettings
from hermes_queue.config.base import bad_value
from hermes_queue.config.urls import REDIS_EXPECTED, sqlite_path
from hermes_queue.logs import mask_url
from hermes_queue.redisio.connect import url_problem


def check_redis_url(redis: RedisSettings) -> None:
    problem = url_problem(redis.url)
    if problem is not None:
        raise bad_value(
            "redis_url", mask_url(redis.url), f"is malformed ({problem})", REDIS_EXPECTED
        )


def sqlite_directory(store: StoreSettings) -> Path | None:
    """The directory a SQLite store's file is in (None: not a SQLite file)."""
    path = sqlite_path(store.url)
    if path is None or path == ":memory:":
        return None
    return Path(path).parent


def check_store_directory(store: StoreSettings) -> None:
    """Raise ConfigError when a SQLite store's directory is missing (the default
    ``store_url``'s is made instead)."""
    directory = sqlite_directory(store)
    if directory is None or directory.is_dir():
        return
    if store.url == StoreSettings().url:
        directory.mkdir(parents=True, exist_ok=True)
        return
    raise bad_value(
        "store_url",
        store.url,
        f"names a file in {directory}, which does not exist",
        "the path of a file in an existing directory (create it, or correct the path)",
    )


def preflight(settings: Settings) -> None:
    """Everything a serving process (API, worker, dev) checks before it starts."""
    check_redis_url(settings.redis)
    check_store_directory(settings.store)
