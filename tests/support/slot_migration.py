"""A hash slot moved from its primary to another a step at a time, as ``redis-cli --cluster
reshard`` moves it: the two nodes told (``CLUSTER SETSLOT … IMPORTING`` / ``MIGRATING``), keys
moved (``MIGRATE``), then every node told the new owner (``SETSLOT … NODE``)."""

from __future__ import annotations

from redis.crc import key_slot

from hermes_queue.keys import Keys
from hermes_queue.runs.placement import new_run_id
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_group import Node


def run_slot(keys: Keys, run_id: str) -> int:
    """The hash slot of a run's keys (its shard's)."""
    return int(key_slot(keys.run(run_id).encode()))


def neighbours(cluster: RedisCluster, keys: Keys) -> tuple[str, str]:
    """Two run ids of different shards that one primary serves: moving one's slot leaves the
    other where it is, on the same node."""
    first = new_run_id()
    node = cluster.node_of_slot(run_slot(keys, first)).port
    second = next(
        r
        for r in iter(new_run_id, None)
        if keys.shard_of(r) != keys.shard_of(first)
        and cluster.node_of_slot(run_slot(keys, r)).port == node
    )
    return first, second


class Migration:
    """One slot moved from its primary to another, a step at a time."""

    def __init__(self, cluster: RedisCluster, slot: int) -> None:
        self.cluster = cluster
        self.slot = slot
        self.source = cluster.node_of_slot(slot)
        self.target = next(n for n in cluster.primary_nodes() if n.port != self.source.port)

    def begin(self) -> None:
        self._setslot(self.target, "IMPORTING", node_id(self.source))
        self._setslot(self.source, "MIGRATING", node_id(self.target))

    def move(self, *keys: str) -> None:
        with self.source.client() as client:
            client.execute_command(
                "MIGRATE", self.target.host, self.target.port, "", 0, 5000, "KEYS", *keys
            )

    def finish(self) -> None:
        """The slot the target's, told to the two nodes and then the rest (as redis-cli does)."""
        owner = node_id(self.target)
        for node in (self.target, self.source, *self.cluster.primary_nodes()):
            self._setslot(node, "NODE", owner)

    def _setslot(self, node: Node, *args: str) -> None:
        with node.client() as client:
            client.execute_command("CLUSTER", "SETSLOT", self.slot, *args)


def node_id(node: Node) -> str:
    with node.client() as client:
        raw = client.execute_command("CLUSTER", "MYID")
    return raw.decode() if isinstance(raw, bytes) else str(raw)
