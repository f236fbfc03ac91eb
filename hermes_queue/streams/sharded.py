"""The stream hub's Redis side on a Redis Cluster: one :class:`Follower` per node.

A run's stream lives on the node serving its shard's slot (``keys.py``), and the scripts
publish its entries on its sharded channel there (``SPUBLISH``), which only that node and its
replicas relay. So the shards are grouped by the primary serving their slot
(``redisio.cluster.primaries_of``) and each group's streams are followed by a follower of its
own, whose two connections go to that node (``redisio.cluster.connect_node``, looked up again
whenever one reconnects: after a failover the follower finds the promoted replica, and reads
every stream it follows from its cursor, as after any lost connection). Its ``XREAD``\\ s and
``SSUBSCRIBE``\\ s name one slot each (a cluster refuses more), pipelined on the connection.

When a follower loses its connection the grouping is asked again; if a shard is now served
elsewhere (a resharding moved its slot, a failover), the followers are rebuilt for the new
groups and every followed stream moves to its new follower with its cursor, so nothing is
missed or repeated. Until the first grouping succeeds (the cluster was down when the process
started) each shard has a follower of its own, as before grouping.

Connections stay constant in the number of clients and streams: two per node per API
process, and none while nothing is followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import cast

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from hermes_queue.aio import cancel_and_wait
from hermes_queue.keys import Keys
from hermes_queue.redisio.cluster import connect_node, primaries_of
from hermes_queue.streams.follower import Follower, Sink

log = logging.getLogger(__name__)

# How often the grouping is checked after a follower lost its connection (seconds).
REGROUP_CHECK_SECONDS = 1.0


class ShardedFollower:
    """The :class:`Follower` interface the hub uses, over one follower per node."""

    def __init__(
        self, redis: Redis, keys: Keys, *, count: int, poll_seconds: float, client_name: str
    ) -> None:
        self.cluster = cast("RedisCluster", redis)
        self.keys = keys
        self._count = count
        self._poll_seconds = poll_seconds
        self._client_name = client_name
        self._where: dict[int, tuple[str, int]] | None = None  # shard -> node; None: ungrouped
        self._of_shard: dict[int, Follower] = {}
        self.followers: list[Follower] = []
        self._retired_losses = 0
        self._retired_xreads = 0
        self._watcher: asyncio.Task[None] | None = None
        self._build({shard: [shard] for shard in keys.shard_ids})

    @property
    def following(self) -> int:
        return sum(follower.following for follower in self.followers)

    @property
    def losses(self) -> int:
        return self._retired_losses + sum(follower.losses for follower in self.followers)

    @property
    def xreads(self) -> int:
        return self._retired_xreads + sum(follower.xreads for follower in self.followers)

    def follow(self, key: str, run_id: str, cursor: str, seq: int | None, sink: Sink) -> None:
        self._of_shard[self.keys.shard_of(run_id)].follow(key, run_id, cursor, seq, sink)

    def unfollow(self, key: str) -> None:
        for follower in self.followers:  # a no-op for the followers not following it
            follower.unfollow(key)

    async def start(self) -> None:
        with contextlib.suppress(RedisError, OSError):
            await self._regroup(refresh=False)
        for follower in self.followers:
            await follower.start()
        self._watcher = asyncio.create_task(self._watch(), name="stream-hub-regroup")

    async def aclose(self) -> None:
        if self._watcher is not None:
            await cancel_and_wait(self._watcher)
        for follower in self.followers:
            await _close(follower)

    # -- grouping --------------------------------------------------------------------------------
    def _build(self, groups: dict[int, list[int]]) -> None:
        """A follower per group (first shard -> the group's shards), on the node serving it."""
        self.followers = []
        self._of_shard = {}
        for first, shards in groups.items():
            follower = Follower(
                connect_node(self.cluster, self.keys.shard_slot(first)),
                count=self._count,
                poll_seconds=self._poll_seconds,
                client_name=f"{self._client_name}:s{first}",
                sharded=True,
            )
            self.followers.append(follower)
            for shard in shards:
                self._of_shard[shard] = follower

    async def _regroup(self, *, refresh: bool) -> None:
        """Ask where each shard is served; when that changed, move every followed stream to
        the follower of its shard's node (with its cursor)."""
        slots = {shard: self.keys.shard_slot(shard) for shard in self.keys.shard_ids}
        at = await primaries_of(self.cluster, slots.values(), refresh=refresh)
        where = {shard: at[slot] for shard, slot in slots.items()}
        if where == self._where:
            return
        started = any(follower.started for follower in self.followers)
        old = self.followers
        moving = [stream for follower in old for stream in follower.export()]
        by_node: dict[tuple[str, int], list[int]] = {}
        for shard, node in where.items():
            by_node.setdefault(node, []).append(shard)
        self._build({shards[0]: shards for shards in by_node.values()})
        self._where = where
        for key, run_id, cursor, seq, sink in moving:  # before any await: none is lost
            self.follow(key, run_id, cursor, seq, sink)
        for follower in old:
            self._retired_losses += follower.losses
            self._retired_xreads += follower.xreads
            await _close(follower)
        for follower in self.followers if started else ():
            await follower.start()
        if started:
            log.info("stream hub: shards regrouped over %d node(s)", len(by_node))

    async def _watch(self) -> None:
        """After a follower lost its connection (or while never grouped): group again."""
        seen = self.losses
        while True:
            await asyncio.sleep(REGROUP_CHECK_SECONDS)
            if self._where is not None and self.losses == seen:
                continue
            try:
                await self._regroup(refresh=True)
            except (RedisError, OSError) as exc:
                log.debug("stream hub: shards not regrouped (%r)", exc)
                continue
            seen = self.losses


async def _close(follower: Follower) -> None:
    await follower.aclose()
    await follower.redis.aclose()


__all__ = ["ShardedFollower"]
