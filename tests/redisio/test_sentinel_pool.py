"""redisio/sentinel_pool.py against two real servers, the Sentinels' answer set by the test:
after a change of primary an idle connection is re-pointed by the caller that takes it, never
closed under a caller that took it (as redis-py's own pool does, in tasks that run later), and a
connection closed under its sender anyway is a call not applied, not an error of its own."""

from __future__ import annotations

import asyncio
import contextlib
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
    _closed_before_written,
)

SERVICE = "hq"
POOLS = [BoundedSentinelPool, SentinelPool]


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
    with contextlib.ExitStack() as stack:
        first = EmbeddedRedis.start()
        stack.callback(first.stop)
        second = EmbeddedRedis.start()
        stack.callback(second.stop)
        yield first, second


async def _mark(server: EmbeddedRedis, name: bytes) -> None:
    admin = aioredis.Redis.from_url(server.url)
    try:
        await admin.set("where", name)
    finally:
        await admin.aclose()


def _pool(kind: type[SentinelPool], named: NamedPrimary) -> SentinelPool:
    options: dict[str, Any] = {"socket_timeout": 5, "socket_connect_timeout": 2}
    if issubclass(kind, BoundedPool):
        options.update(max_connections=4, timeout=2)
    return kind(SERVICE, named, connection_class=SwitchoverSentinelConnection, **options)


@pytest.mark.parametrize("kind", POOLS)
async def test_a_new_primary_closes_no_connection_a_caller_took(
    kind: type[SentinelPool], servers: tuple[EmbeddedRedis, EmbeddedRedis]
) -> None:
    old, new = servers
    await _mark(old, b"old")
    await _mark(new, b"new")
    named = NamedPrimary(old)
    pool = _pool(kind, named)
    client = aioredis.Redis(connection_pool=pool)
    learning: asyncio.Task[Any] | None = None
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
        if learning is not None:
            learning.cancel()
            with contextlib.suppress(BaseException):
                await learning
        await client.aclose()
        await pool.disconnect()


@pytest.mark.parametrize("kind", POOLS)
async def test_learning_of_a_new_primary_closes_no_idle_connection_and_keeps_a_current_one(
    kind: type[SentinelPool], servers: tuple[EmbeddedRedis, EmbeddedRedis]
) -> None:
    old, new = servers
    pool = _pool(kind, NamedPrimary(new))
    client = aioredis.Redis(connection_pool=pool)
    try:
        first = await client.client_id()
        assert await client.client_id() == first  # on the primary: kept, not made again
        idle = await pool.get_connection()
        await pool.release(idle)
        pool.sentinel_manager.server = old  # the primary named changes (back to the old one)
        await pool.get_master_address()  # redis-py's awaits the closing of the idle ones
        assert idle.is_connected  # nobody closed it under a caller that might hold it
        await _mark(old, b"old")
        assert await client.get("where") == b"old"  # its next taker re-pointed it
    finally:
        await client.aclose()
        await pool.disconnect()


@pytest.mark.parametrize("socket_timeout", [None, 5.0])
def test_a_command_on_a_connection_closed_under_it_was_not_applied(
    redis_url: str, socket_timeout: float | None
) -> None:
    """uvloop (the processes' loop) refuses a write to a closed transport with a RuntimeError
    of its own, before anything is written; with a socket timeout the write runs in a task of
    its own (``asyncio.wait_for``), as it does in every pooled client."""

    async def send_after_close() -> None:
        pool = BoundedPool.from_url(
            redis_url, connection_class=SwitchoverConnection, socket_timeout=socket_timeout
        )
        connection = await pool.get_connection()
        try:
            connection._writer.transport.close()  # type: ignore[attr-defined]
            await asyncio.sleep(0)
            with pytest.raises(NotApplied, match="closed before the command was written"):
                await connection.send_command("PING")
        finally:
            await pool.release(connection)
            await pool.disconnect()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(send_after_close())


def test_only_a_write_to_a_closed_connection_is_taken_for_one() -> None:
    """Any other AttributeError or RuntimeError raised under a send is a fault of its own: it
    propagates (a 500 with its traceback), never retried as if Redis had refused the call."""
    writer: Any = None
    with pytest.raises(AttributeError) as gone:
        writer.writelines([b"PING"])
    assert _closed_before_written(gone.value)
    with pytest.raises(AttributeError) as other:
        writer.drain()
    assert not _closed_before_written(other.value)
    assert not _closed_before_written(
        RuntimeError("read() called while another coroutine is already waiting for incoming data")
    )
