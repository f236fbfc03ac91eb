"""Whether an address stays on this machine: the API's bind address (a key is required beyond
it) and Redis's (processes sharing a loopback Redis share this host, and so a SQLite file)."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP (v4 or v6); a host name other than localhost is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
