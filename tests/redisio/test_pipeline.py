"""The pipelined connection the worker appends on, against a real Redis: many callers share one
socket and each gets its own reply; failures reach the calls they concern, never a hang."""

from __future__ import annotations

import asyncio
import gc
import uuid

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.redisio.pipeline import PipelinedConnection


@pytest.fixture
async def pipe(redis: aioredis.Redis) -> PipelinedConnection:
    connection = PipelinedConnection(redis, f"test-pipe-{uuid.uuid4().hex[:8]}", timeout=2.0)
    yield connection  # type: ignore[misc]
    await connection.aclose()


async def _client_id(redis: aioredis.Redis, name: str) -> int:
    for client in await redis.client_list():
        if client.get("name") == name:
            return int(client["id"])
    raise AssertionError(f"no client named {name}")


async def test_concurrent_calls_share_one_connection_and_get_their_own_replies(
    pipe: PipelinedConnection, redis: aioredis.Redis, namespace: str
) -> None:
    values = [f"{namespace}:{i}" for i in range(500)]
    replies = await asyncio.gather(*(pipe.call("ECHO", value) for value in values))
    assert [reply.decode() for reply in replies] == values
    named = [c for c in await redis.client_list() if c.get("name") == pipe.client_name]
    assert len(named) == 1


async def test_an_error_reply_fails_only_its_own_call(
    pipe: PipelinedConnection, redis: aioredis.Redis, namespace: str
) -> None:
    await redis.set(f"{namespace}:text", "not a number")
    good_before, bad, good_after = await asyncio.gather(
        pipe.call("INCR", f"{namespace}:n"),
        pipe.call("INCR", f"{namespace}:text"),
        pipe.call("INCR", f"{namespace}:n"),
        return_exceptions=True,
    )
    assert (good_before, good_after) == (1, 2)
    assert isinstance(bad, ResponseError)
    assert await pipe.call("GET", f"{namespace}:n") == b"2"


async def test_an_argument_that_cannot_be_encoded_fails_only_its_own_call(
    pipe: PipelinedConnection, redis: aioredis.Redis, namespace: str
) -> None:
    """A lone surrogate used to fail inside the send, which dropped the shared connection and
    every call in flight on it (issue 12 §1)."""
    await pipe.call("SET", f"{namespace}:warm", "1")
    client_id = await _client_id(redis, pipe.client_name)
    slow = asyncio.ensure_future(pipe.call("BLPOP", f"{namespace}:never", "0.3"))
    await asyncio.sleep(0.05)  # BLPOP is on the wire and waiting
    with pytest.raises(UnicodeEncodeError):
        await pipe.call("SET", f"{namespace}:bad", "\ud800")
    assert await slow is None  # the call in flight got its own reply
    assert await pipe.call("INCR", f"{namespace}:n") == 1
    assert await _client_id(redis, pipe.client_name) == client_id  # the same connection
    assert await redis.exists(f"{namespace}:bad") == 0


async def test_a_script_redis_does_not_hold_is_loaded_and_run(
    pipe: PipelinedConnection, redis: aioredis.Redis, namespace: str
) -> None:
    # A body no test has loaded: its EVALSHA meets NOSCRIPT first.
    script = redis.register_script(
        f"-- {uuid.uuid4().hex}\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])"
    )
    assert await redis.script_exists(script.sha) == [False]
    assert await pipe.evalsha(script, [f"{namespace}:s"], [5]) == 5
    assert await pipe.evalsha(script, [f"{namespace}:s"], [5]) == 10


async def test_calls_in_flight_fail_at_once_when_the_connection_dies_and_the_next_reconnects(
    pipe: PipelinedConnection, redis: aioredis.Redis, namespace: str
) -> None:
    await pipe.call("PING")
    blocked = asyncio.ensure_future(pipe.call("BLPOP", f"{namespace}:never", 30))
    behind = asyncio.ensure_future(pipe.call("ECHO", "queued behind the BLPOP"))
    client_id = await _client_id(redis, pipe.client_name)
    await redis.client_kill_filter(_id=client_id)
    for call in (blocked, behind):
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(call, timeout=5)
    assert await pipe.call("ECHO", "back") == b"back"
    assert await _client_id(redis, pipe.client_name) != client_id


async def test_a_send_that_fails_leaves_no_reply_unretrieved(pipe: PipelinedConnection) -> None:
    """A send on a connection closed under it fails its own call (and those in flight); the
    replies it had queued are never handed out, and asyncio must not report them at collection
    as "exception was never retrieved" (an ERROR in every worker's log at each switchover)."""
    reported: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        await pipe.call("PING")
        pipe._conn._writer.transport.close()  # type: ignore[union-attr]  # closed under it
        with pytest.raises(RedisConnectionError, match="send failed"):
            await pipe.call("ECHO", "into a closed connection")
        gc.collect()
        assert not reported, reported
        assert await pipe.call("ECHO", "back") == b"back"
    finally:
        loop.set_exception_handler(None)


async def test_a_reply_that_never_comes_times_out_and_the_connection_is_replaced(
    redis: aioredis.Redis, namespace: str
) -> None:
    pipe = PipelinedConnection(redis, f"test-pipe-{uuid.uuid4().hex[:8]}", timeout=0.2)
    try:
        await pipe.call("PING")
        first_id = await _client_id(redis, pipe.client_name)
        with pytest.raises(RedisTimeoutError):
            await pipe.call("BLPOP", f"{namespace}:never", 5)
        # The next call cannot be handed the BLPOP's late reply: it runs on a new connection.
        await redis.rpush(f"{namespace}:never", "late")
        assert await pipe.call("ECHO", "fresh") == b"fresh"
        assert await _client_id(redis, pipe.client_name) != first_id
    finally:
        await pipe.aclose()


async def test_a_closed_connection_refuses_calls(pipe: PipelinedConnection) -> None:
    await pipe.call("PING")
    await pipe.aclose()
    with pytest.raises(RedisConnectionError):
        await pipe.call("PING")
