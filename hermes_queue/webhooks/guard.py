"""Safe webhook targets: a URL's host is resolved and every address checked when the
connection is made, not when the URL was accepted (a name can resolve elsewhere by then: DNS
rebinding), and loopback, private, link-local (cloud metadata), multicast, unspecified,
reserved and other non-public addresses are refused, unless the host is allow-listed
(``webhook_allowed_hosts``: host names, addresses or networks).

The check sits in the one place every connection's addresses pass through: the connector's
``_resolve_host``, which answers both names (through its resolver) and literal addresses
(which aiohttp never hands to a resolver). Only the addresses that pass are returned, so only
they are ever connected to; none passing refuses the attempt with :class:`TargetRefused`
before any packet is sent. ``tests/webhooks/test_guard.py`` holds aiohttp to that.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:
    from aiohttp.abc import ResolveResult
    from aiohttp.tracing import Trace

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TargetRefused(OSError):
    """The target's addresses are all refused (the message says which and why)."""


def refusal(address: Address) -> str | None:
    """Why ``address`` is no webhook target ("loopback", "private", …), None when public."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    for reason, flagged in (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
    ):
        if flagged:
            return reason
    return None if address.is_global else "not public"


class AllowList:
    """``webhook_allowed_hosts``: host names (as in the URL, any case) and addresses or
    networks (``127.0.0.1``, ``10.1.0.0/16``) whose targets are never refused."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.names: set[str] = set()
        self.networks: list[Network] = []
        for entry in (e.strip() for e in entries):
            if not entry:
                continue
            try:
                self.networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                self.names.add(_host_name(entry))

    def allows(self, host: str, address: Address) -> bool:
        return _host_name(host) in self.names or any(address in n for n in self.networks)


def _host_name(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def check(host: str, addresses: Sequence[str], allowed: AllowList) -> list[str]:
    """The addresses of ``host`` it may connect to; :class:`TargetRefused` when none."""
    passed, refused = [], []
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        reason = None if allowed.allows(host, address) else refusal(address)
        if reason is None:
            passed.append(text)
        else:
            refused.append(f"{address} ({reason})")
    if not passed:
        raise TargetRefused(f"webhook target {host} refused: {', '.join(refused) or 'no address'}")
    return passed


class GuardedConnector(aiohttp.TCPConnector):
    """A TCP connector that connects only to addresses :func:`check` passes, checked on every
    connection (no DNS cache: a name is resolved afresh each time)."""

    def __init__(self, allowed: AllowList, **kwargs: Any) -> None:
        kwargs.setdefault("use_dns_cache", False)
        super().__init__(**kwargs)
        self.allowed = allowed

    async def _resolve_host(
        self, host: str, port: int, traces: Sequence[Trace] | None = None
    ) -> list[ResolveResult]:
        hosts = await super()._resolve_host(host, port, traces=traces)
        passed = set(check(host, [h["host"] for h in hosts], self.allowed))
        return [h for h in hosts if h["host"] in passed]


def refused_by_guard(exc: BaseException) -> TargetRefused | None:
    """The guard's refusal behind an aiohttp connection error, if that is what it was."""
    seen: BaseException | None = exc
    for _ in range(4):  # aiohttp wraps it once or twice
        if seen is None or isinstance(seen, TargetRefused):
            return seen
        seen = seen.__cause__ or getattr(seen, "os_error", None)
    return None
