"""Simulated hosts for tests: Linux network namespaces joined by veth pairs on a bridge.

Needs root (CI runs as root) and ``ip`` from iproute2. Every address lives inside a namespace
this module creates: a *switch* namespace holds the bridge, and each :class:`Host` namespace
holds one end of a veth pair (``eth0``, an address of a private /24) whose other end is a port
of the bridge. Nothing is added to the namespace the tests run in, and :meth:`Network.destroy`
(also run at exit) SIGKILLs every process left in the namespaces and deletes them.

A process runs on a host through ``ip netns exec`` (:attr:`Host.launcher`); the test itself
talks to the hosts from a client host it enters with :meth:`Host.entered` (``setns(2)`` on the
calling thread, which is the event loop's, so the sockets it opens from then on belong there).
Cutting a host off is setting its bridge port down: packets are then dropped, as when a cable
is pulled, and the host's connections resume when the port comes back up.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns failed")


@dataclass(eq=False)
class Host:
    """One simulated host: a network namespace with ``address`` on its ``eth0``."""

    network: Network
    name: str  # the namespace
    address: str
    port_name: str  # its bridge port, in the switch namespace

    @property
    def launcher(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def pids(self) -> list[int]:
        return [int(pid) for pid in ip("netns", "pids", self.name).split()]

    def kill_all(self) -> list[int]:
        """SIGKILL every process in the namespace: the whole host dies at once."""
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids

    def cut(self) -> None:
        """Pull the host's cable: its bridge port goes down, its packets are dropped."""
        ip("-n", self.network.switch, "link", "set", self.port_name, "down")

    def reconnect(self) -> None:
        ip("-n", self.network.switch, "link", "set", self.port_name, "up")

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Run the calling thread in this host's namespace for the block."""
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{self.name}", os.O_RDONLY)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(home)
        finally:
            os.close(target)
            os.close(home)


@dataclass
class Network:
    """A bridge in a switch namespace and the hosts plugged into it (10.<a>.<b>.0/24)."""

    prefix: str = field(default_factory=lambda: f"hq{uuid.uuid4().hex[:6]}")
    subnet: str = "10.231.0"
    hosts: list[Host] = field(default_factory=list)
    created: list[str] = field(default_factory=list)

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    def create(self) -> Network:
        atexit.register(self.destroy)
        self._add_namespace(self.switch)
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")
        return self

    def _add_namespace(self, name: str) -> None:
        ip("netns", "add", name)
        self.created.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    def add_host(self, role: str) -> Host:
        index = len(self.hosts) + 1
        name = f"{self.prefix}-{role}"
        port = f"p{index}"
        self._add_namespace(name)
        # Both ends are created inside the test's namespaces, never in the caller's.
        ip("-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns",
           self.switch)  # fmt: skip
        ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
        address = f"{self.subnet}.{index + 1}"
        ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
        ip("-n", name, "link", "set", "eth0", "up")
        host = Host(self, name, address, port)
        self.hosts.append(host)
        return host

    def destroy(self) -> None:
        """Kill what still runs in the namespaces, then delete them (idempotent)."""
        for name in reversed(self.created):
            with contextlib.suppress(RuntimeError):
                for pid in ip("netns", "pids", name).split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
        for name in reversed(self.created):
            with contextlib.suppress(RuntimeError):
                ip("netns", "del", name)
        self.created.clear()
        atexit.unregister(self.destroy)
