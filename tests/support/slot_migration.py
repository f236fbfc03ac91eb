"""A hash slot moved from its primary to another a step at a time, as ``redis-cli --cluster
reshard`` moves it: the two nodes told (``CLUSTER SETSLOT … IMPORTING`` / ``MIGRATING``), keys
moved (``MIGRATE``), then every node told the new owner (``SETSLOT … NODE``)."""

from __future__ import annotations

from tests.support.redis_cluster import RedisCluster
from tests.support.redis_group import Node


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
