"""The stream hub's Redis side on a Redis Cluster: one :class:`Follower` per shard.

A run's stream lives on the node serving its shard's slot (``keys.py``), and the scripts
publish its entries on its sharded channel there (``SPUBLISH``), which only that node and its
replicas relay. So each shard's streams are followed by a follower of their own, whose two
connections go to the node serving the shard, looked up again whenever one reconnects
(``redisio.cluster.connect_node``): after a failover the follower finds the promoted replica, and
reads every stream it follows from its cursor, as after any lost connection. Its ``XREAD``\\ s
name only streams of its shard, all in one slot, as a cluster requires.

Connections stay constant in the number of clients and streams: two per shard
(``redis_cluster_shards``) per API process.
"""

from __future__ import annotations

from typing import cast

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from hermes_queue.keys import Keys
from hermes_queue.redisio.cluster import connect_node
from hermes_queue.streams.follower import Follower, Sink


class ShardedFollower:
    """The :class:`Follower` interface the hub uses, over one follower per shard."""

    def __init__(
        self, redis: Redis, keys: Keys, *, count: int, poll_seconds: float, client_name: str
    ) -> None:
        cluster = cast("RedisCluster", redis)
        self.keys = keys
        self.followers = [
            Follower(
                connect_node(cluster, keys.shard_slot(shard)),
                count=count,
                poll_seconds=poll_seconds,
                client_name=f"{client_name}:s{shard}",
                sharded=True,
            )
            for shard in keys.shard_ids
        ]

    @property
    def following(self) -> int:
        return sum(follower.following for follower in self.followers)

    @property
    def losses(self) -> int:
        return sum(follower.losses for follower in self.followers)

    @property
    def xreads(self) -> int:
        return sum(follower.xreads for follower in self.followers)

    def follow(self, key: str, run_id: str, cursor: str, seq: int | None, sink: Sink) -> None:
        self.followers[self.keys.shard_of(run_id)].follow(key, run_id, cursor, seq, sink)

    def unfollow(self, key: str) -> None:
        for follower in self.followers:  # a no-op for the followers not following it
            follower.unfollow(key)

    async def start(self) -> None:
        for follower in self.followers:
            await follower.start()

    async def aclose(self) -> None:
        for follower in self.followers:
            await follower.aclose()
            await follower.redis.aclose()


__all__ = ["ShardedFollower"]
