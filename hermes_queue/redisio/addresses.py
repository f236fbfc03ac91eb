"""Addresses: whether one stays on this machine (the API's bind address: a key is required
beyond it; Redis's: processes sharing a loopback Redis share this host, and so a SQLite file),
and the ``host:port`` items of the Sentinel and Cluster URLs' node lists."""

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


def host_and_port(item: str, default_port: int, what: str) -> tuple[str, int]:
    """One ``host[:port]`` or ``[ipv6][:port]`` of a node list; ``what`` names the item in the
    ValueError a malformed one raises ("Sentinel address", "cluster node address")."""
    item = item.strip()
    if item.startswith("["):  # [ipv6]:port
        host, _, port = item[1:].partition("]")
        port = port.removeprefix(":")
    else:
        host, _, port = item.rpartition(":") if ":" in item else (item, "", "")
    if not host:
        raise ValueError(f"{what} {item!r} has no host")
    if port and not port.isdigit():
        raise ValueError(f"{what} {item!r} has a bad port")
    return host, int(port) if port else default_port
