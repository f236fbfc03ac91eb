"""The cluster client's resend rule (redisio/cluster_retry.py) on a real cluster: a read or a
pipeline of reads whose reply was lost is sent again; a write is not (redis-py's own client
would send it again); a run creation is, and recognises itself. The reply is lost by
``tests/support/lossy.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from hermes_queue.config import Settings
from hermes_queue.redisio import cluster_retry
from hermes_queue.redisio.connect import close, connect
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from tests.support.lossy import LosesReply, script_sha


@pytest.fixture
async def client(
    cluster_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[aioredis.Redis]:
    monkeypatch.setattr(cluster_retry, "SwitchoverConnection", LosesReply)
    built = connect(cluster_settings.redis)
    try:
        yield built
    finally:
        LosesReply.armed = None
        await close(built)


async def test_a_read_whose_reply_was_lost_is_sent_again(
    client: aioredis.Redis, namespace: str
) -> None:
    key = f"{namespace}:read"
    await client.set(key, "v")
    LosesReply.arm(key.encode())
    assert await client.get(key) == b"v"
    assert LosesReply.lost == 1
    pipe = client.pipeline(transaction=False)
    pipe.get(key)
    pipe.strlen(key)
    LosesReply.arm(key.encode())
    assert await pipe.execute() == [b"v", 1]
    assert LosesReply.lost == 1


async def test_a_write_whose_reply_was_lost_is_not_sent_again(
    client: aioredis.Redis, namespace: str
) -> None:
    key = f"{namespace}:counter"
    LosesReply.arm(key.encode())
    with pytest.raises(RedisConnectionError):
        await client.incr(key)
    assert await client.get(key) == b"1"  # applied once


async def test_a_run_created_whose_reply_was_lost_exists_once(
    client: aioredis.Redis, cluster_settings: Settings
) -> None:
    keys = cluster_settings.redis.keys
    repo = RunRepository(client, keys, cluster_settings.replace(redis_min_replicas=0).runs)
    run_id = new_run_id()
    LosesReply.arm(script_sha("create", sharded=True))
    assert await repo.create(NewRun(run_id, "s1", TurnRequest("hi")))
    assert LosesReply.lost == 1
    queue = keys.queue_at(keys.shard_of(run_id))
    assert await client.zrange(queue, 0, -1) == [run_id.encode()]
    await repo.aclose()
