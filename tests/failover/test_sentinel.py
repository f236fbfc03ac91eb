"""Every kind of Redis client a process opens (the CLI's too) follows a Sentinel failover by
itself.

A primary, a replica and three Sentinels run as real processes; the clients are built by the
factories in ``redisio.connect`` from a ``redis+sentinel://`` URL, once, before the primary is
SIGKILLed, and used again after the promotion: none is rebuilt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from arq.connections import create_pool

from hermes_queue.cli.check import CheckResult, run_checks
from hermes_queue.cli.ops import redis_session
from hermes_queue.config import Settings
from hermes_queue.jobqueue.connection import redis_settings as arq_settings
from hermes_queue.keys import Keys
from hermes_queue.redisio.connect import connect, connect_sync, connect_url
from hermes_queue.redisio.pipeline import PipelinedConnection
from hermes_queue.streams.hub import StreamHub
from tests.streams.test_hub import take, write_run
from tests.support.polling import eventually
from tests.support.redis_group import SentinelGroup

T = TypeVar("T")
RECOVERY_SECONDS = 20.0


@pytest.fixture
def group() -> Iterator[SentinelGroup]:
    with SentinelGroup() as started:
        yield started


async def recovered(call: Callable[[], Awaitable[T]]) -> T:
    """``call()`` once it stops failing with a Redis error (the failover under way)."""
    return await eventually(
        call,
        lambda _: True,
        within=RECOVERY_SECONDS,
        every=0.1,
        retry_on=(redis.RedisError, OSError),
        what="a call through the failover",
    )


async def test_every_client_reaches_the_new_primary_without_being_rebuilt(
    group: SentinelGroup, namespace: str
) -> None:
    settings = Settings.of(redis_url=group.url, namespace=namespace)
    pooled = connect(settings.redis)
    listener = connect(settings.redis, for_pubsub=True)
    threaded = connect_sync(settings.redis)
    appends = PipelinedConnection(pooled, "test:appends")
    arq = await create_pool(arq_settings(settings.redis))
    try:
        await pooled.set("before", "1")
        assert await appends.call("GET", "before") == b"1"
        assert threaded.get("before") == b"1"
        assert await arq.get("before") == b"1"

        old = group.kill_primary()
        new = await group.wait_for_new_primary(old)

        await recovered(lambda: pooled.set("pooled", "1"))
        await recovered(lambda: appends.call("SET", "appends", "1"))
        await recovered(lambda: asyncio.to_thread(threaded.set, "threaded", "1"))
        await recovered(lambda: arq.set("arq", "1"))
        with new.client() as direct:
            assert direct.mget("before", "pooled", "appends", "threaded", "arq") == [b"1"] * 5

        async def hear_one() -> Any:
            pubsub = listener.pubsub()
            try:
                await pubsub.subscribe("chan")
                confirmed = await pubsub.get_message(timeout=2.0)
                assert confirmed is not None and confirmed["type"] == "subscribe"
                await pooled.publish("chan", "hello")
                return await pubsub.get_message(timeout=2.0)
            finally:
                await pubsub.aclose()  # type: ignore[no-untyped-call]

        message = await recovered(hear_one)
        assert message is not None and message["data"] == b"hello"
    finally:
        await appends.aclose()
        await pooled.aclose()
        await listener.aclose()
        await arq.aclose()
        threaded.close()


async def test_stream_hub_follows_a_run_across_the_failover(
    group: SentinelGroup, namespace: str
) -> None:
    keys = Keys(namespace)
    writer = connect_url(group.url)
    hub = StreamHub(group.url, keys, poll_ms=200)
    await hub.start()
    try:
        await write_run(writer, keys, "r1", 3)
        async with hub.subscribe("r1") as sub:
            assert [e.seq for e in await take(sub, 3)] == [1, 2, 3]
            old = group.kill_primary()
            await group.wait_for_new_primary(old)
            await recovered(lambda: write_run(writer, keys, "r1", 2, start=4, end=True))
            tail = await take(sub, 3, within=RECOVERY_SECONDS)
        assert [e.seq for e in tail] == [4, 5, 6]
        assert tail[-1].terminal
    finally:
        await hub.aclose()
        await writer.aclose()


async def test_cli_check_and_status_read_through_sentinel(
    group: SentinelGroup, namespace: str, tmp_path: Path
) -> None:
    settings = Settings.of(
        redis_url=group.url, namespace=namespace, store_url=f"sqlite:///{tmp_path}/s.db"
    )
    old = group.kill_primary()
    await group.wait_for_new_primary(old)
    redis_check = await recovered(lambda: _redis_ok(settings))
    assert redis_check.ok and redis_check.detail.startswith("redis+sentinel://")
    async with redis_session(settings) as client:
        assert await client.ping()


async def _redis_ok(settings: Settings) -> CheckResult:
    result = next(r for r in await run_checks(settings) if r.name == "redis")
    if not result.ok:
        raise redis.ConnectionError(result.detail)
    return result
