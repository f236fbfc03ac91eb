"""The bounded pool every pooled client uses, against a real Redis: at most N connections,
waiters served in order and bounded in time, nothing lost to a caller that gives up, and a
connection the server closed (or a command left unread) replaced before anyone uses it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection, Connection
from redis.exceptions import ConnectionError as RedisConnectionError

from hermes_queue.config import Settings
from hermes_queue.redisio.connect import connect
from hermes_queue.redisio.pool import BoundedPool
from tests.support.polling import eventually


@pytest.fixture
async def pool(redis_url: str) -> AsyncIterator[BoundedPool]:
    bounded = BoundedPool.from_url(
        redis_url, max_connections=2, timeout=0.3, client_name=f"test-pool-{uuid.uuid4().hex[:8]}"
    )
    yield bounded  # type: ignore[misc]
    await bounded.disconnect()


async def _client_ids(redis: aioredis.Redis, name: str) -> set[int]:
    return {int(c["id"]) for c in await redis.client_list() if c.get("name") == name}


async def test_a_free_connection_is_handed_out_without_a_trip_through_the_loop(
    pool: BoundedPool,
) -> None:
    connection = await pool.get_connection()
    await pool.release(connection)
    getting = pool.get_connection()
    with pytest.raises(StopIteration) as taken:  # the coroutine finished on its first step
        getting.send(None)
    assert taken.value.value is connection
    await pool.release(connection)


async def test_callers_beyond_the_bound_wait_and_are_served_in_order(pool: BoundedPool) -> None:
    first, second = await pool.get_connection(), await pool.get_connection()
    served: list[tuple[str, AbstractConnection]] = []

    async def wait(name: str) -> None:
        connection = await pool.get_connection()
        served.append((name, connection))

    early = asyncio.create_task(wait("early"))
    await asyncio.sleep(0)  # early queues before late
    late = asyncio.create_task(wait("late"))
    await asyncio.sleep(0)
    assert served == []  # two connections, both in use: nobody got a third
    await pool.release(second)
    await early
    assert served == [("early", second)]  # the released connection, open, to the oldest waiter
    await pool.release(first)
    await late
    assert served[1] == ("late", first)
    for _, connection in served:
        await pool.release(connection)
    assert len(pool._in_use_connections) == 0
    assert len(pool._available_connections) == 2


async def test_a_wait_beyond_the_timeout_fails_cleanly(pool: BoundedPool) -> None:
    held = [await pool.get_connection(), await pool.get_connection()]
    with pytest.raises(RedisConnectionError, match="No connection available"):
        await pool.get_connection()
    for connection in held:
        await pool.release(connection)
    again = await pool.get_connection()  # the timed-out wait left nothing behind
    assert again in held
    await pool.release(again)


async def test_a_cancelled_waiter_does_not_keep_the_connection_it_was_given(
    pool: BoundedPool,
) -> None:
    held = [await pool.get_connection(), await pool.get_connection()]
    waiting = asyncio.create_task(pool.get_connection())
    await asyncio.sleep(0)
    await pool.release(held[0])  # handed to the waiter ...
    waiting.cancel()  # ... which is cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert held[0] in pool._available_connections  # passed on, not lost
    await pool.release(held[1])
    both = [await pool.get_connection(), await pool.get_connection()]
    assert set(both) == set(held)
    for connection in both:
        await pool.release(connection)


async def test_a_connection_the_server_closed_is_replaced_before_use(
    pool: BoundedPool, redis: aioredis.Redis
) -> None:
    client = aioredis.Redis(connection_pool=pool)
    assert await client.ping()
    name = pool.connection_kwargs["client_name"]
    (killed,) = await _client_ids(redis, name)
    await redis.client_kill_filter(_id=killed)
    (idle,) = pool._available_connections
    await eventually(
        lambda: asyncio.sleep(0, result=idle._reader.at_eof()),  # type: ignore[attr-defined]
        bool,
        within=5,
        what="the loop seeing the connection closed",
    )
    assert await client.ping()  # no ConnectionError: reconnected first
    assert await _client_ids(redis, name) not in ({killed}, set())


async def test_a_command_cancelled_before_its_reply_leaves_no_reply_behind(
    redis_url: str, redis: aioredis.Redis, namespace: str
) -> None:
    """One connection, so the call after the cancelled one gets whatever that connection is."""
    name = f"test-pool-{uuid.uuid4().hex[:8]}"
    pool = BoundedPool.from_url(redis_url, max_connections=1, timeout=2, client_name=name)
    client = aioredis.Redis(connection_pool=pool)
    key = f"{namespace}:list"
    try:
        blocked = asyncio.create_task(client.blpop([key], timeout=5))
        await eventually(
            redis.client_list,
            lambda clients: any(c.get("name") == name and c["cmd"] == "blpop" for c in clients),
            within=5,
            what="BLPOP blocked in Redis",
        )
        blocked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocked
        await client.rpush(key, "x")
        # Neither a BLPOP still waiting on a live connection took it, nor was its late reply
        # read as this call's.
        assert await client.lpop(key) == b"x"
        assert await client.echo("after") == b"after"
    finally:
        await pool.disconnect()


async def test_the_clients_the_project_builds_use_it(settings: Settings) -> None:
    client = connect(settings.redis)
    try:
        assert isinstance(client.connection_pool, BoundedPool)
        burst = await asyncio.gather(*(client.echo(str(i)) for i in range(200)))
        assert [b.decode() for b in burst] == [str(i) for i in range(200)]
        pool = client.connection_pool
        assert len(pool._in_use_connections) + len(pool._available_connections) <= 32
    finally:
        await client.aclose()


class _GatedHandshake(Connection):
    """A connection whose handshake (``CLIENT SETNAME`` …) waits for the test's go-ahead."""

    gate = asyncio.Event()

    async def on_connect(self) -> None:
        await self.gate.wait()
        await super().on_connect()


async def test_a_connection_whose_handshake_was_cut_short_is_never_used(
    redis_url: str, redis: aioredis.Redis
) -> None:
    name = f"test-pool-{uuid.uuid4().hex[:8]}"
    _GatedHandshake.gate = asyncio.Event()
    pool = BoundedPool.from_url(
        redis_url, max_connections=1, timeout=2, client_name=name, connection_class=_GatedHandshake
    )
    client = aioredis.Redis(connection_pool=pool)
    try:
        first = asyncio.create_task(client.ping())
        (connection,) = await eventually(
            lambda: asyncio.sleep(
                0, result=[c for c in pool._in_use_connections if c.is_connected]
            ),
            bool,
            within=5,
            what="the socket connected, the handshake waiting",
        )
        first.cancel()  # the caller gives up mid-handshake
        with pytest.raises(asyncio.CancelledError):
            await first
        assert not connection.is_connected  # not left looking ready without its handshake
        _GatedHandshake.gate.set()
        assert await client.ping()
        assert len(await _client_ids(redis, name)) == 1  # the command ran after a full handshake
    finally:
        await pool.disconnect()
