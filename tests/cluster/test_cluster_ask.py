"""The worker's appends while a slot is migrated key by key (``CLUSTER SETSLOT … MIGRATING`` /
``IMPORTING``, ``MIGRATE``: what ``redis-cli --cluster reshard`` does), driven a step at a time:
a call whose key already moved is answered ``ASK`` and must run on the importing node after
``ASKING``; a call whose keys the migration has split is answered ``TRYAGAIN`` and must run once
they are together again; each runs exactly once. The same for a write through
``call_replicated`` (run creation, an attempt's terminal write), which waits out the split within
``redis_switchover_wait_seconds``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

import pytest
import redis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.commands.core import AsyncScript
from redis.crc import key_slot

from hermes_queue.config import Settings
from hermes_queue.redisio.connect import connect, connect_url
from hermes_queue.redisio.pipeline import SlotPipelines
from hermes_queue.redisio.replication import call_replicated
from tests.support.polling import eventually
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_group import Node
from tests.support.slot_migration import Migration

# Appends an entry to every key, then counts the entries of all of them.
APPEND_AND_COUNT = """
local total = 0
for _, key in ipairs(KEYS) do
    redis.call('XADD', key, '*', 'n', ARGV[1])
    total = total + redis.call('XLEN', key)
end
return total
"""


@pytest.fixture
async def cluster(redis_cluster: RedisCluster) -> AsyncIterator[AsyncRedisCluster]:
    client = connect_url(redis_cluster.url)
    assert isinstance(client, AsyncRedisCluster)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def appends(cluster: AsyncRedisCluster) -> AsyncIterator[SlotPipelines]:
    pipelines = SlotPipelines(cluster, "test-appends")
    try:
        yield pipelines
    finally:
        await pipelines.aclose()


def _registered(cluster: AsyncRedisCluster) -> AsyncScript:
    return AsyncScript(cast(Redis, cluster), APPEND_AND_COUNT)  # what the worker's scripts are


def _asked_connections(node: Node) -> int:
    with node.client() as client:
        return sum(1 for c in client.client_list() if c.get("name", "").endswith(":asked"))


async def test_an_append_to_a_key_already_migrated_runs_on_the_importing_node(
    redis_cluster: RedisCluster, cluster: AsyncRedisCluster, appends: SlotPipelines
) -> None:
    key = "{hq-ask-one}:stream"
    script = _registered(cluster)
    migration = Migration(redis_cluster, int(key_slot(key.encode())))
    assert await appends.evalsha(script, [key], ["1"]) == 1  # on the source

    migration.begin()
    migration.move(key)
    # The source answers ASK: run on the target, which has the first entry, after ASKING.
    assert await appends.evalsha(script, [key], ["2"]) == 2
    assert await appends.evalsha(script, [key], ["3"]) == 3
    assert appends.redirections["ASK"] == 2
    assert _asked_connections(migration.target) == 1  # one kept for the migration

    migration.finish()
    # The source answers MOVED: the slot's connection now goes to the target.
    assert await appends.evalsha(script, [key], ["4"]) == 4
    assert appends.redirections["MOVED"] == 1
    assert await appends.evalsha(script, [key], ["5"]) == 5
    assert appends.redirections["MOVED"] == 1
    with redis_cluster.client() as client:
        assert [fields[b"n"] for _, fields in client.xrange(key)] == [b"1", b"2", b"3", b"4", b"5"]
    # The ASK connection closes once the migration is over.
    await eventually(lambda: _asked_connections(migration.target) == 0, within=15)


async def test_an_append_whose_keys_the_migration_split_runs_once_they_are_together(
    redis_cluster: RedisCluster, cluster: AsyncRedisCluster, appends: SlotPipelines
) -> None:
    keys = ["{hq-ask-split}:a", "{hq-ask-split}:b"]
    script = _registered(cluster)
    migration = Migration(redis_cluster, int(key_slot(keys[0].encode())))
    assert await appends.evalsha(script, keys, ["1"]) == 1 + 1

    migration.begin()
    migration.move(keys[0])
    call = asyncio.ensure_future(appends.evalsha(script, keys, ["2"]))
    # Split between the nodes, the keys cannot be used together: asked again, nothing run.
    await eventually(lambda: appends.redirections["TRYAGAIN"] >= 2, within=10)
    assert not call.done()
    migration.move(keys[1])
    migration.finish()
    assert await call == 2 + 2  # run once, on the target

    with redis_cluster.client() as client:
        assert [client.xlen(key) for key in keys] == [2, 2]
        assert client.nodes_manager.get_node_from_slot(migration.slot).port == migration.target.port


async def test_a_reply_that_is_no_redirection_fails_the_call_alone(
    cluster: AsyncRedisCluster, appends: SlotPipelines
) -> None:
    key = "{hq-ask-wrong}:string"
    await cluster.set(key, "not a stream")
    script = _registered(cluster)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        await appends.evalsha(script, [key], ["1"])
    assert not appends.redirections
    other = "{hq-ask-wrong}:stream"
    assert await appends.evalsha(script, [other], ["1"]) == 1


def _connections_named(node: Node, name: str) -> int:
    with node.client() as client:
        return sum(1 for c in client.client_list() if c.get("name", "") == name)


async def test_calls_in_flight_when_a_slot_moves_reconnect_once(
    redis_cluster: RedisCluster, cluster: AsyncRedisCluster, appends: SlotPipelines
) -> None:
    """Every call in flight on the old owner's connection is answered ``MOVED``; they all go
    on over one new connection, not one each (a caller must not retire the connection
    another caller has just opened), and each runs once."""
    key = "{hq-ask-burst}:stream"
    script = _registered(cluster)
    migration = Migration(redis_cluster, int(key_slot(key.encode())))
    assert await appends.evalsha(script, [key], ["0"]) == 1
    migration.begin()
    migration.move(key)
    migration.finish()
    results = await asyncio.gather(
        *(appends.evalsha(script, [key], [str(n)]) for n in range(1, 21))
    )
    assert sorted(results) == list(range(2, 22))  # each ran once, on the new owner
    name = f"test-appends:{migration.slot}"
    assert _connections_named(migration.target, name) == 1
    assert appends.redirections["MOVED"] == 20


async def test_a_slot_no_node_serves_is_asked_again_of_the_cluster(
    redis_cluster: RedisCluster, cluster: AsyncRedisCluster, appends: SlotPipelines
) -> None:
    """``CLUSTERDOWN`` (here: the owner stopped serving the slot): the call waits and runs
    once, when the slot is served again; the connection it dropped at each answer (the
    cluster may name another node by then) is closed, one left."""
    key = "{hq-ask-down}:stream"
    script = _registered(cluster)
    slot = int(key_slot(key.encode()))
    owner = redis_cluster.node_of_slot(slot)
    assert await appends.evalsha(script, [key], ["1"]) == 1
    with owner.client() as client:
        client.execute_command("CLUSTER", "DELSLOTS", slot)
    try:
        call = asyncio.ensure_future(appends.evalsha(script, [key], ["2"]))
        await eventually(lambda: appends.redirections["CLUSTERDOWN"] >= 2, within=10)
        assert not call.done()
    finally:
        with owner.client() as client:
            client.execute_command("CLUSTER", "ADDSLOTS", slot)
    assert await call == 2
    assert _connections_named(owner, f"test-appends:{slot}") == 1


def _tryagain_replies(node: Node) -> int:
    with node.client() as client:
        return int(client.info("errorstats").get("errorstat_TRYAGAIN", {}).get("count", 0))


@pytest.mark.parametrize(
    ("replicas", "one_send"),
    [(0, 16), (1, 1)],  # the cluster client's own tries; the script and WAIT on the node
    ids=["cluster-client", "with-wait"],
)
async def test_a_replicated_write_whose_keys_the_migration_split_waits_until_they_are_together(
    redis_cluster: RedisCluster, cluster_settings: Settings, replicas: int, one_send: int
) -> None:
    """A migration splitting a script's keys answers ``TRYAGAIN`` until they are together. Sent
    by redis-py's cluster client, 16 such replies end in ``ClusterError("TTL exhausted.")``; on
    the node's own connection (``WAIT`` after it), the reply has its word stripped. Either is a
    write not applied, sent again by ``call_replicated`` (run creation, an attempt's terminal
    write) within ``redis_switchover_wait_seconds``: both used to fail the write at once. (The
    test cluster has no replicas: ``WAIT`` finds none, which ``strict=False`` only logs.)"""
    keys = [f"{{hq-replicated-split-{replicas}}}:a", f"{{hq-replicated-split-{replicas}}}:b"]
    client = connect(cluster_settings.redis)

    def write(n: str) -> asyncio.Future[int]:
        return asyncio.ensure_future(
            call_replicated(script, keys=keys, args=[n], replicas=replicas, strict=False)
        )

    try:
        script = _registered(cast(AsyncRedisCluster, client))
        assert await write("1") == 1 + 1
        migration = Migration(redis_cluster, int(key_slot(keys[0].encode())))
        refused_before = _tryagain_replies(migration.source)
        migration.begin()
        migration.move(keys[0])
        call = write("2")
        # More refusals than one send makes: the write was sent again.
        await eventually(
            lambda: _tryagain_replies(migration.source) > refused_before + one_send or call.done(),
            within=10,
        )
        assert not call.done(), call.exception()
        migration.move(keys[1])
        migration.finish()
        assert await call == 2 + 2  # run once, on the target
        with redis_cluster.client() as plain:
            assert [plain.xlen(key) for key in keys] == [2, 2]
    finally:
        await client.aclose()
