"""A worker's wake-ups, stop requests and approval answers on a Redis Cluster: one sharded
subscription connection per node, for the shards that node serves.

On a cluster the run scripts publish a shard's wake-ups and control messages on that shard's
sharded channels (``SPUBLISH``, ``keys.wake_channel_at`` / ``control_channel_at``), which only
the node serving the shard relays. So the shards are grouped by the primary serving their slot
(``redisio.cluster.primaries_of``), and a worker keeps one connection per such node, on which it
``SSUBSCRIBE``\\ s the two channels of each of the node's shards (one command per shard: the
channels of one command must share a slot). A message names its channel, so its shard.

When a node's connection is lost, or Redis unsubscribes a channel (its slot moved: a
resharding, a failover), the slot table is asked again and the groups rebuilt: a node whose
shards are unchanged keeps its connection, the others are subscribed afresh where their shards
are now served. redis-py's asyncio pub/sub has no sharded subscriptions; the replies are read
here as the stream hub's follower reads its own. A message lost while a connection is down
costs what it costs on one primary: each shard re-subscribed is reported (``on_subscribed``)
and its queue read, and the lease heartbeat reports a stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from hermes_queue.aio import cancel_and_wait, cancel_requested
from hermes_queue.keys import Keys
from hermes_queue.redisio.cluster import connect_address, primaries_of
from hermes_queue.redisio.health import OutageLog
from hermes_queue.redisio.pipeline import dedicated_connection

log = logging.getLogger(__name__)

# (channel kind: "wake" or "control", the shard, the message) for every message heard.
OnMessage = Callable[[str, int, str], None]
Address = tuple[str, int]


class _Health:
    """A node's reconnect back-off and outage log, kept across its connections."""

    def __init__(self, address: Address) -> None:
        self.delay = 0.05
        self.outage = OutageLog(log, f"channels on {address[0]}:{address[1]}")


class _Node:
    """One node's connection and the shards it is subscribed for."""

    def __init__(self, shards: frozenset[int], task: asyncio.Task[None]) -> None:
        self.shards = shards
        self.task = task


async def listen_shards(
    cluster: RedisCluster, keys: Keys, on_message: OnMessage, on_subscribed: Callable[[int], None]
) -> None:
    """Listen to every shard until cancelled. ``on_subscribed(shard)`` is called each time a
    shard's subscription to both its channels takes effect (anything published before it went
    unheard: poll)."""
    slots = {shard: keys.shard_slot(shard) for shard in keys.shard_ids}
    nodes: dict[Address, _Node] = {}
    health: dict[Address, _Health] = {}
    outage = OutageLog(log, "shard channels")
    refresh = False
    try:
        while not cancel_requested():
            try:
                where = await primaries_of(cluster, slots.values(), refresh=refresh)
            except (OSError, aioredis.RedisError) as exc:
                outage.failed(exc)
                await asyncio.sleep(1.0)
                continue
            refresh = True
            groups: dict[Address, frozenset[int]] = {}
            for shard, slot in slots.items():
                groups[where[slot]] = groups.get(where[slot], frozenset()) | {shard}
            for address, node in list(nodes.items()):
                if node.task.done() or groups.get(address) != node.shards:
                    await cancel_and_wait(node.task)
                    del nodes[address]
            for address, shards in groups.items():
                if address not in nodes:
                    state = health.setdefault(address, _Health(address))
                    task = asyncio.create_task(
                        _listen_node(
                            cluster, address, keys, shards, on_message, on_subscribed, state
                        )
                    )
                    nodes[address] = _Node(shards, task)
            # Until a node's connection ends (lost, or a channel moved): then regroup.
            await asyncio.wait(
                [node.task for node in nodes.values()], return_when=asyncio.FIRST_COMPLETED
            )
    finally:
        await cancel_and_wait(*(node.task for node in nodes.values()))


async def _listen_node(
    cluster: RedisCluster,
    address: Address,
    keys: Keys,
    shards: frozenset[int],
    on_message: OnMessage,
    on_subscribed: Callable[[int], None],
    health: _Health,
) -> None:
    """Subscribe to ``shards``' channels on the node at ``address`` and hand on what is heard;
    returns (after a back-off) once the connection is lost or a channel moved away."""
    kinds: dict[str, tuple[str, int]] = {}
    for shard in shards:
        kinds[keys.wake_channel_at(shard)] = ("wake", shard)
        kinds[keys.control_channel_at(shard)] = ("control", shard)
    client = connect_address(cluster, address)
    conn = dedicated_connection(client, f"hermes-queue:listener:{address[0]}:{address[1]}")
    try:
        await conn.connect()  # type: ignore[no-untyped-call]
        for shard in sorted(shards):  # one command per shard: its channels share its slot
            await conn.send_command(
                "SSUBSCRIBE", keys.wake_channel_at(shard), keys.control_channel_at(shard)
            )
        confirmed: set[str] = set()
        while True:
            reply = await conn.read_response(timeout=None)
            kind, channel = reply[0], _text(reply[1])
            if kind == b"ssubscribe" and channel in kinds:
                confirmed.add(channel)
                shard = kinds[channel][1]
                if {keys.wake_channel_at(shard), keys.control_channel_at(shard)} <= confirmed:
                    health.delay = 0.05
                    health.outage.ok()
                    on_subscribed(shard)
            elif kind == b"smessage" and channel in kinds:
                on_message(kinds[channel][0], kinds[channel][1], _text(reply[2]))
            elif kind == b"sunsubscribe":  # the slot moved: regroup where it is served now
                return
    except (OSError, aioredis.RedisError) as exc:
        health.outage.failed(exc)  # once per outage, not per reconnect
        health.delay = min(health.delay * 2, 2.0)
        await asyncio.sleep(health.delay)
    finally:
        with contextlib.suppress(Exception):
            await conn.disconnect(nowait=True)
        await client.aclose()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


__all__ = ["listen_shards"]
