"""redisio/sentinel_pool.py against two real servers, the Sentinels' answer set by the test:
after a change of primary an idle connection is re-pointed by the caller that takes it, never
closed under a caller that took it (as redis-py's own pool does, in tasks that run later), and a
connection closed under its sender anyway is a call not applied, not an error of its own."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis
import uvloop

from hermes_queue.redisio.embedded import EmbeddedRedis
from hermes_queue.redisio.pool import BoundedPool
from hermes_queue.redisio.sentinel_pool import BoundedSentinelPool, SentinelPool
from hermes_queue.redisio.switchover import (
    NotApplied,
    SwitchoverConnection,
    SwitchoverSentinelConnection,
)

SERVICE = "hq"


class NamedPrimary:
    """The Sentinels' answer to "which node is the primary", as the test sets it."""

    def __init__(self, server: EmbeddedRedis) -> None:
        self.sentinels: list[Any] = []
        self.server = server

    async def discover_master(self, service: str) -> tuple[str, int]:
        assert service == SERVICE
        return "127.0.0.1", self.server.port


@pytest.fixture
def servers() -> Iterator[tuple[EmbeddedRedis, EmbeddedRedis]]:
    first, second = EmbeddedRedis.start(), EmbeddedRedis.start()
    try:
        yield first, second
    finally:
        first.stop()
        second.stop()


def _pool(kind: type[SentinelPool], named: NamedPrimary) -> SentinelPool:
    options: dict[str, Any] = {"socket_timeout": 5, "socket_connect_timeout": 2}
    if issubclass(kind, BoundedPool):
        options.update(max_connections=4, timeout=2)
    return kind(SERVICE, named, connection_class=SwitchoverSentinelConnection, **options)


@pytest.mark.parametrize("kind", [BoundedSentinelPool, SentinelPool])
async def test_a_new_primary_closes_no_connection_a_caller_took(
    kind: type[SentinelPool], servers: tuple[EmbeddedRedis, EmbeddedRedis]
) -> None:
    old, new = servers
    for server, name in ((old, b"old"), (new, b"new")):
        admin = aioredis.Redis.from_url(server.url)
        await admin.set("where", name)
        await admin.aclose()
    named = NamedPrimary(old)
    pool = _pool(kind, named)
    client = aioredis.Redis(connection_pool=pool)
    try:
        assert await client.get("where") == b"old"  # one connection, idle now, to the old one
        named.server = new
        # A connection being made learns of the new primary (as after a READONLY) just as a
        # caller takes the idle one for a command.
        learning = asyncio.create_task(pool.get_master_address())
        await asyncio.sleep(0)
        assert pool.master_address == ("127.0.0.1", new.port)
        assert await client.get("where") == b"new"
        await learning
        assert await client.get("where") == b"new"
    finally:
        await client.aclose()
        await pool.disconnect()


def test_a_command_on_a_connection_closed_under_it_was_not_applied(redis_url: str) -> None:
    """uvloop (the processes' loop) refuses a write to a closed transport with a RuntimeError
    of its own, before anything is written."""

    async def send_after_close() -> None:
        pool = BoundedPool.from_url(redis_url, connection_class=SwitchoverConnection)
        connection = await pool.get_connection()
        try:
            connection._writer.transport.close()  # type: ignore[attr-defined]  # by another task
            await asyncio.sleep(0)
            with pytest.raises(NotApplied, match="closed before the command was written"):
                await connection.send_command("PING")
        finally:
            await pool.release(connection)
            await pool.disconnect()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(send_after_close())
