"""A worker's wake-ups, stop requests and approval answers on a Redis Cluster: one sharded
subscription per shard.

On a cluster the run scripts publish a shard's wake-ups and control messages on that shard's
sharded channels (``SPUBLISH``, ``keys.wake_channel_at`` / ``control_channel_at``), which only
the node serving the shard relays. So a worker keeps one connection per shard to the node
serving it (``redisio.cluster.connect_node``, looked up again on every reconnect, so a failover
leads it to the promoted replica) and ``SSUBSCRIBE``\\ s both channels there. redis-py's asyncio
pub/sub has no sharded subscriptions; the replies are read here as the stream hub's follower
reads its own. A message lost while a shard's connection is down costs what it costs on one
primary: the worker's timed poll finds the run, and the lease heartbeat reports a stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from hermes_queue.aio import cancel_requested
from hermes_queue.keys import Keys
from hermes_queue.redisio.cluster import connect_node
from hermes_queue.redisio.health import OutageLog
from hermes_queue.redisio.pipeline import dedicated_connection

log = logging.getLogger(__name__)

# (channel kind: "wake" or "control", the shard, the message) for every message heard.
OnMessage = Callable[[str, int, str], None]


async def listen_shards(
    cluster: RedisCluster, keys: Keys, on_message: OnMessage, on_subscribed: Callable[[int], None]
) -> None:
    """Listen to every shard until cancelled. ``on_subscribed(shard)`` is called each time a
    shard's subscription to both its channels takes effect (anything published before it went
    unheard: poll)."""
    nodes = [connect_node(cluster, keys.shard_slot(shard)) for shard in keys.shard_ids]
    try:
        await asyncio.gather(
            *(
                _listen_shard(node, keys, shard, on_message, on_subscribed)
                for shard, node in zip(keys.shard_ids, nodes, strict=True)
            )
        )
    finally:
        for node in nodes:
            await node.aclose()


async def _listen_shard(
    node: aioredis.Redis,
    keys: Keys,
    shard: int,
    on_message: OnMessage,
    on_subscribed: Callable[[int], None],
) -> None:
    kinds = {keys.wake_channel_at(shard): "wake", keys.control_channel_at(shard): "control"}
    delay = 0.1
    outage = OutageLog(log, f"shard {shard} channels")
    while not cancel_requested():
        conn = dedicated_connection(node, f"hermes-queue:listener:s{shard}")
        try:
            await conn.connect()  # type: ignore[no-untyped-call]
            await conn.send_command("SSUBSCRIBE", *kinds)
            while True:
                reply = await conn.read_response(timeout=None)
                kind, channel = reply[0], _text(reply[1])
                if kind == b"ssubscribe" and reply[2] == len(kinds):  # one reply a channel
                    delay = 0.1
                    outage.ok()
                    on_subscribed(shard)
                elif kind == b"smessage" and channel in kinds:
                    on_message(kinds[channel], shard, _text(reply[2]))
                elif kind == b"sunsubscribe":  # the slot moved: follow it to its node
                    raise aioredis.ConnectionError(f"{channel} unsubscribed by Redis")
        except (OSError, aioredis.RedisError) as exc:
            outage.failed(exc)  # once per outage, not per reconnect
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        finally:
            with contextlib.suppress(Exception):
                await conn.disconnect(nowait=True)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


__all__ = ["listen_shards"]
