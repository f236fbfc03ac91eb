"""A Redis primary, its replicas and three Sentinels as real processes, for failover tests.

Every node is the same ``redis-server`` binary (Sentinels run it with ``--sentinel``), on free
ports of one address, without persistence, in a temporary directory. Sentinel's timings are
shortened (``down_after_ms``, ``failover_timeout_ms``) so a failover takes a few seconds.

``group.url`` is the ``redis+sentinel://`` URL processes are configured with; ``kill_primary``
SIGKILLs the current primary, ``wait_for_new_primary`` awaits the end of the failover, and
``restart`` brings a killed node back as the replica of the primary now (never as an empty
primary: see ``restart``).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

from hermes_queue.redisio.embedded import bundled_redis_server, free_port
from tests.support.polling import eventually

SERVICE = "hq"


@dataclass
class Node:
    """One ``redis-server`` process (data node or Sentinel) on ``host:port``."""

    name: str
    host: str
    port: int
    args: list[str]
    workdir: Path
    launcher: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None

    def start(self, within: float = 10.0, args: Sequence[str] | None = None) -> None:
        """Start it with its arguments (``args`` instead, this time only)."""
        log = (self.workdir / f"{self.name}.log").open("ab")
        self.process = subprocess.Popen(
            [*self.launcher, *(self.args if args is None else args)],
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + within
        while not self.answers():
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.log()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} never answered:\n{self.log()[-2000:]}")
            time.sleep(0.02)

    def answers(self) -> bool:
        try:
            with self.client(timeout=0.5) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def client(self, timeout: float = 5.0) -> redis.Redis:
        return redis.Redis(self.host, self.port, socket_timeout=timeout, socket_connect_timeout=1)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        path = self.workdir / f"{self.name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _without_replicaof(args: list[str]) -> list[str]:
    """A node's arguments without the primary it was first started to replicate."""
    if "--replicaof" not in args:
        return list(args)
    at = args.index("--replicaof")
    return args[:at] + args[at + 3 :]


@dataclass
class SentinelGroup:
    """A primary, ``replicas`` replicas and ``sentinels`` Sentinels on ``host``."""

    host: str = "127.0.0.1"
    replicas: int = 1
    sentinels: int = 3
    down_after_ms: int = 1_000
    failover_timeout_ms: int = 3_000
    launcher: list[str] = field(default_factory=list)
    ports: list[int] | None = None  # fixed ports (netns hosts); free loopback ports otherwise
    nodes: list[Node] = field(default_factory=list)
    watchers: list[Node] = field(default_factory=list)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="hq-sentinel-")))

    def _port(self, index: int) -> int:
        return self.ports[index] if self.ports else free_port()

    def start(self) -> SentinelGroup:
        binary = bundled_redis_server()
        for index in range(1 + self.replicas):
            port = self._port(index)
            args = [binary, "--port", str(port), "--bind", self.host, "--save", ""]
            args += ["--appendonly", "no", "--protected-mode", "no", "--dir", str(self.workdir)]
            args += ["--dbfilename", f"node{index}.rdb", "--repl-diskless-sync", "yes"]
            args += ["--repl-diskless-sync-delay", "0"]
            if index:
                args += ["--replicaof", self.host, str(self.nodes[0].port)]
            node = Node(f"node{index}", self.host, port, args, self.workdir, self.launcher)
            node.start()
            self.nodes.append(node)
        self._await_replicas(self.nodes[0], self.replicas)
        for index in range(self.sentinels):
            port = self._port(1 + self.replicas + index)
            conf = self.workdir / f"sentinel{index}.conf"
            conf.write_text(self._sentinel_conf(port))
            args = [binary, str(conf), "--sentinel"]
            watcher = Node(f"sentinel{index}", self.host, port, args, self.workdir, self.launcher)
            watcher.start()
            self.watchers.append(watcher)
        self._await_sentinels_agree()
        return self

    def _sentinel_conf(self, port: int) -> str:
        primary = self.nodes[0]
        return "\n".join(
            [
                f"port {port}",
                f"bind {self.host}",
                "protected-mode no",
                f"dir {self.workdir}",
                f"sentinel monitor {SERVICE} {primary.host} {primary.port} 2",
                f"sentinel down-after-milliseconds {SERVICE} {self.down_after_ms}",
                f"sentinel failover-timeout {SERVICE} {self.failover_timeout_ms}",
                f"sentinel parallel-syncs {SERVICE} 1",
                "",
            ]
        )

    @property
    def url(self) -> str:
        hosts = ",".join(f"{w.host}:{w.port}" for w in self.watchers)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def primary(self) -> Node:
        """The node the Sentinels name as primary now."""
        address = self.primary_address()
        for node in self.nodes:
            if (node.host, node.port) == address:
                return node
        raise AssertionError(f"no node at {address}")

    def primary_address(self) -> tuple[str, int] | None:
        """What the first Sentinel that answers says (None: none answers)."""
        for address in self._addresses():
            if address is not None:
                return address
        return None

    def _addresses(self) -> list[tuple[str, int] | None]:
        """The primary each Sentinel names (None: it does not answer)."""
        named: list[tuple[str, int] | None] = []
        for watcher in self.watchers:
            address = None
            with contextlib.suppress(redis.RedisError), watcher.client(timeout=1) as client:
                answer = client.sentinel_get_master_addr_by_name(SERVICE)
                if answer:
                    address = answer[0].decode(), int(answer[1])
            named.append(address)
        return named

    def kill_primary(self) -> Node:
        primary = self.primary()
        primary.kill()
        return primary

    async def wait_for_new_primary(self, old: Node, within: float = 30.0) -> Node:
        """Await the end of the failover away from ``old``: every Sentinel names the promoted
        replica, which is writable. (The leader names it first, the others a moment later:
        one still naming ``old`` would take a node started there meanwhile for the primary.)"""

        def promoted() -> Node | None:
            named = set(self._addresses())
            if len(named) != 1:
                return None
            address = named.pop()
            if address is None or address == (old.host, old.port):
                return None
            node = self.primary()
            with contextlib.suppress(redis.RedisError), node.client(timeout=1) as client:
                if client.info("replication")["role"] == "master":
                    return node
            return None

        node = await eventually(promoted, within=within, every=0.1, what=self._promotion_failed)
        assert node is not None
        return node

    def _promotion_failed(self) -> str:
        logs = "\n".join(w.log()[-1500:] for w in self.watchers)
        return f"a replica promoted; the Sentinels' logs:\n{logs}"

    async def restart(self, node: Node, within: float = 30.0) -> None:
        """Start a killed node again, as the replica of the current primary, and await it
        synced. A node without persistence (these have none) must never come back as an empty
        primary (redis.io, replication, "Safety of replication when master has persistence
        turned off"): started with its first arguments, a killed primary believes it still is
        one until Sentinel turns it into a replica some 10 s later, and Sentinel lists it as a
        replica meanwhile, so a failover in that window (a spurious one, when a loaded machine
        outlasts the 1 s down-after) promotes it and every node resyncs from it, empty: the
        group's data is gone. A supervisor of such a node starts it as a replica, as this does.
        Connects from the caller's thread (its network namespace)."""
        primary = self.primary()
        node.start(
            args=[*_without_replicaof(node.args), "--replicaof", primary.host, str(primary.port)]
        )
        await eventually(
            lambda: self._replicas_online(self.primary()) >= self.replicas,
            within=within,
            every=0.1,
            what=f"{node.name} back as a replica",
        )

    def _replicas_online(self, primary: Node) -> int:
        with contextlib.suppress(redis.RedisError), primary.client(timeout=1) as client:
            info = client.info("replication")
            return sum(
                1
                for key, value in info.items()
                if key.startswith("slave")
                and isinstance(value, dict)
                and value.get("state") == "online"
            )
        return 0

    def _await_replicas(self, primary: Node, count: int, within: float = 30.0) -> None:
        deadline = time.monotonic() + within
        while self._replicas_online(primary) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{primary.name} has fewer than {count} replica(s) online")
            time.sleep(0.05)

    def _await_sentinels_agree(self, within: float = 30.0) -> None:
        """Every Sentinel knows the others and the replicas (so any of them can fail over)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            ready = 0
            for watcher in self.watchers:
                with contextlib.suppress(redis.RedisError), watcher.client(timeout=1) as client:
                    state = client.sentinel_master(SERVICE)
                    if (
                        int(state["num-other-sentinels"]) >= self.sentinels - 1
                        and int(state["num-slaves"]) >= self.replicas
                    ):
                        ready += 1
            if ready == self.sentinels:
                return
            time.sleep(0.1)
        raise AssertionError("the Sentinels never discovered each other and the replicas")

    def stop(self) -> None:
        for node in [*self.watchers, *self.nodes]:
            node.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> SentinelGroup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
