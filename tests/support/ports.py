"""Ports for a server a test configures before it starts.

``free_port()`` asks the kernel for a port (bind to 0) and lets it go: a server the test starts
later binds it then, but meanwhile anything else binding port 0 (an in-process API's test
server, a client's outgoing connection) can be handed the very same port, and the test then
talks to the wrong server (seen: a worker's metrics scrape answered 401 by the API). A port below
the kernel's ephemeral range is never handed out that way.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000


def _ephemeral_floor() -> int:
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def unclaimed_port() -> int:
    """A loopback port free now that the kernel does not give out to port-0 binds."""
    floor = _ephemeral_floor()
    for _ in range(200):
        port = random.randrange(_LOWEST, floor)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in [{_LOWEST}, {floor})")
