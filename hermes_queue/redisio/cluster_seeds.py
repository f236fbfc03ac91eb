"""A cluster client that always finds its way back to the configured seeds.

redis-py drops a node from a cluster client's startup nodes each time a command on it fails
with a connection error or a timeout, and rebuilds its slot table from those nodes only. When
every node failed before a rebuild succeeded (commands in flight on all nodes through a network
blip, a switchover, a loaded host), the set is empty and the client is dead for good:
``Redis Cluster cannot be connected. Please provide at least one reachable node: None`` on
every call, though the cluster is back (redis/redis-py#3693, open; it failed a worker's
shutdown in our CI). Here the startup nodes remember the configured seeds, and each rebuild
first puts back the seeds that were dropped, after the nodes still there, so a dropped seed is
asked only when the others did not answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from redis.cluster import get_node_name


class _NodesManager(Protocol):
    """What both of redis-py's nodes managers (sync and asyncio) have and this module uses."""

    startup_nodes: dict[str, Any]


class SeedKeepingNodes(dict[str, Any]):
    """redis-py's ``startup_nodes`` (a dict of name -> node it mutates in place), knowing the
    addresses it was configured with."""

    def __init__(self, nodes: dict[str, Any], seeds: Iterable[tuple[str, int]]) -> None:
        super().__init__(nodes)
        self.seeds = [(host, int(port)) for host, port in seeds]

    def restore(self, make_node: Callable[[str, int], Any]) -> None:
        for host, port in self.seeds:
            name = get_node_name(host, port)
            if name not in self:
                self[name] = make_node(host, port)


def keep_seeds(manager: _NodesManager) -> SeedKeepingNodes:
    """Make ``manager``'s startup nodes remember today's: call once, on a new client."""
    nodes = manager.startup_nodes
    if not isinstance(nodes, SeedKeepingNodes):
        nodes = SeedKeepingNodes(nodes, ((n.host, n.port) for n in nodes.values()))
        manager.startup_nodes = nodes
    return nodes


def restore_seeds(manager: _NodesManager, make_node: Callable[[str, int], Any]) -> None:
    """Before a rebuild: put back the seeds redis-py dropped (see the module docstring)."""
    nodes = manager.startup_nodes
    if isinstance(nodes, SeedKeepingNodes):
        nodes.restore(make_node)


def seeds_of(manager: _NodesManager) -> list[tuple[str, int]]:
    """The configured seeds (those still known when :func:`keep_seeds` was not called)."""
    nodes = manager.startup_nodes
    if isinstance(nodes, SeedKeepingNodes):
        return list(nodes.seeds)
    return [(n.host, int(n.port)) for n in nodes.values()]


__all__ = ["SeedKeepingNodes", "keep_seeds", "restore_seeds", "seeds_of"]
