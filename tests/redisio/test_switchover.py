"""redisio/switchover.py against real servers of its own (a primary and a replica, never the
shared Redis: a pause there would stall every other test): a call refused as not applied
(READONLY, no connection) waits for a writable primary within ``redis_switchover_wait_seconds``;
a call that may have been applied is not sent again unless it is safe to
(tests/failover/test_resend.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from hermes_queue.config import Settings
from hermes_queue.redisio.connect import close, connect
from hermes_queue.redisio.embedded import free_port
from hermes_queue.redisio.switchover import NotApplied
from tests.support.polling import eventually
from tests.support.redis_group import SentinelGroup

WAIT = 2.0
SCRIPT = "redis.call('INCR', KEYS[1]); return redis.call('GET', KEYS[1])"


@pytest.fixture
def nodes() -> Iterator[SentinelGroup]:
    """A primary and its replica, no Sentinel."""
    with SentinelGroup(sentinels=0) as started:
        yield started


def _url(port: int) -> str:
    return f"redis://127.0.0.1:{port}/0"


async def test_a_write_refused_by_a_replica_waits_for_it_to_be_promoted(
    nodes: SentinelGroup,
) -> None:
    replica = nodes.nodes[1]
    client = connect(
        Settings.of(redis_url=_url(replica.port), redis_switchover_wait_seconds=WAIT).redis
    )
    script = client.register_script(SCRIPT)
    try:
        with replica.client() as admin:
            refused = int(admin.info("stats")["total_error_replies"])
            call = asyncio.ensure_future(script(keys=["counter"]))
            await eventually(
                lambda: int(admin.info("stats")["total_error_replies"]) > refused + 1,
                what="the call refused by the replica, and sent again",
            )
            assert not call.done()
            admin.execute_command("REPLICAOF", "NO", "ONE")
        assert int(await asyncio.wait_for(call, WAIT)) == 1  # applied once, on the new primary
    finally:
        await close(client)


async def test_a_replica_that_stays_one_fails_after_the_wait(nodes: SentinelGroup) -> None:
    client = connect(
        Settings.of(redis_url=_url(nodes.nodes[1].port), redis_switchover_wait_seconds=0.3).redis
    )
    try:
        started = time.monotonic()
        with pytest.raises(NotApplied, match="READONLY"):
            await client.register_script(SCRIPT)(keys=["counter"])
        assert 0.3 <= time.monotonic() - started < 10  # waited, then gave up: never hangs
        # Reads are served by a replica as before.
        assert await client.get("counter") is None
    finally:
        await close(client)


async def test_no_server_is_waited_for_then_refused() -> None:
    client = connect(
        Settings.of(redis_url=_url(free_port()), redis_switchover_wait_seconds=0.3).redis
    )
    try:
        started = time.monotonic()
        with pytest.raises(NotApplied, match="not connected"):
            await client.get("anything")
        assert 0.3 <= time.monotonic() - started < 10  # waited, then gave up: never hangs
    finally:
        await close(client)


async def test_a_call_cut_after_it_was_sent_is_not_sent_again(nodes: SentinelGroup) -> None:
    primary = nodes.nodes[0]
    client = connect(
        Settings.of(redis_url=_url(primary.port), redis_switchover_wait_seconds=WAIT).redis
    )
    script = client.register_script(SCRIPT)
    try:
        await script(keys=["warm"])  # loaded, connected
        with primary.client() as admin:
            admin.execute_command("CLIENT", "PAUSE", 5000, "WRITE")
            call = asyncio.ensure_future(script(keys=["counter"]))
            await eventually(
                lambda: int(admin.info("clients")["blocked_clients"]) >= 1,
                what="the call sent and held by the pause",
            )
            admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            with pytest.raises(RedisConnectionError) as raised:
                await asyncio.wait_for(call, 1)  # at once: not retried
            assert not isinstance(raised.value, NotApplied)
            admin.execute_command("CLIENT", "UNPAUSE")
            assert admin.get("counter") is None  # the killed call was not applied, nor resent
    finally:
        await close(client)
