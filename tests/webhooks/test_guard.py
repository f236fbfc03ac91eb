"""Webhook targets are checked at connect time: refused addresses are never connected to.

Only loopback is ever a real target here. Private, link-local (metadata), multicast and IPv6
loopback answers come from a stubbed resolver, and every connection goes through a tripwire
socket factory that refuses (and records) any address outside 127.0.0.0/8, so even a broken
guard could not send a packet anywhere else.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from hermes_queue.webhooks import attempt
from hermes_queue.webhooks.guard import AllowList, GuardedConnector, TargetRefused, check, refusal
from tests.support.webhook_receiver import Receiver, receiving


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.0.0.2", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.9", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("224.0.0.251", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "not public"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fd00::1", "private"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "link-local"),
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
    ],
)
def test_which_addresses_are_refused(address: str, reason: str | None) -> None:
    assert refusal(ipaddress.ip_address(address)) == reason


def test_the_allow_list_takes_names_addresses_and_networks() -> None:
    allowed = AllowList(["LocalHost.", "127.0.0.1", "10.9.0.0/16", "[::1]"])
    assert check("localhost", ["127.0.0.5"], allowed) == ["127.0.0.5"]
    assert check("x.test", ["127.0.0.1", "10.9.4.4", "::1"], allowed) == [
        "127.0.0.1",
        "10.9.4.4",
        "::1",
    ]
    with pytest.raises(TargetRefused, match=r"127\.0\.0\.2 \(loopback\)"):
        check("127.0.0.2", ["127.0.0.2"], allowed)
    # A name answering public and private addresses: only the public one is kept.
    assert check("mixed.test", ["10.0.0.1", "93.184.216.34"], AllowList([])) == ["93.184.216.34"]


class StubResolver(AbstractResolver):
    """Answers every name with the addresses it was given; never asks DNS."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        return [
            ResolveResult(
                hostname=host,
                host=a,
                port=port,
                family=socket.AF_INET6 if ":" in a else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for a in self.addresses
        ]

    async def close(self) -> None:
        pass


class Tripwire:
    """The connector's socket factory: makes sockets for loopback only, records anything else."""

    def __init__(self) -> None:
        self.tripped: list[Any] = []
        self.connected: list[Any] = []

    def __call__(self, addr_info: Any) -> socket.socket:
        family, kind, proto, _name, sockaddr = addr_info
        if not ipaddress.ip_address(sockaddr[0]).is_loopback or ":" in sockaddr[0]:
            self.tripped.append(sockaddr)
            raise OSError(f"tripwire: no connection to {sockaddr[0]} in a test")
        self.connected.append(sockaddr)
        return socket.socket(family, kind, proto)


async def _post(connector: GuardedConnector, url: str) -> attempt.Result:
    async with aiohttp.ClientSession(connector=connector) as session:
        return await attempt.post(session, url, {"webhook-id": "msg_x"}, "{}", 5.0)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with receiving([]) as started:
        yield started


@pytest.mark.parametrize(
    "answer", [["10.20.30.40"], ["169.254.169.254"], ["::1"], ["fd12::7"], ["0.0.0.0"]]
)
async def test_a_name_resolving_to_a_refused_address_is_never_connected(answer: list[str]) -> None:
    resolver, wire = StubResolver(answer), Tripwire()
    connector = GuardedConnector(AllowList(["127.0.0.1"]), resolver=resolver, socket_factory=wire)
    result = await _post(connector, "http://hooks.example.test:8080/in")
    assert result.kind == "refused" and answer[0] in (result.error or "")
    assert resolver.asked == ["hooks.example.test"]  # resolved at connect time
    assert wire.tripped == [] and wire.connected == []


async def test_an_allow_listed_name_is_connected_to(receiver: Receiver) -> None:
    port = int(receiver.url.split(":")[2].split("/")[0])
    resolver, wire = StubResolver(["127.0.0.1"]), Tripwire()
    connector = GuardedConnector(
        AllowList(["hooks.internal"]), resolver=resolver, socket_factory=wire
    )
    result = await _post(connector, f"http://hooks.internal:{port}/in")
    assert result.kind == "2xx" and len(receiver.received) == 1
    assert [s[0] for s in wire.connected] == ["127.0.0.1"]


async def test_a_loopback_address_off_the_allow_list_is_never_connected() -> None:
    """127.0.0.2 listens for real; the guard refuses it before any connection is made."""
    accepted: list[object] = []
    probed = asyncio.Event()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer.get_extra_info("peername"))
        probed.set()
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.2", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        wire = Tripwire()
        connector = GuardedConnector(AllowList(["127.0.0.1", "localhost"]), socket_factory=wire)
        result = await _post(connector, f"http://127.0.0.2:{port}/in")
        # The same listener is reachable: the refusal is the guard's, not the network's.
        _reader, writer = await asyncio.open_connection("127.0.0.2", port)
        await asyncio.wait_for(probed.wait(), 5)
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    assert result.kind == "refused" and "127.0.0.2 (loopback)" in (result.error or "")
    assert wire.connected == [] and len(accepted) == 1


async def test_a_redirect_is_not_followed() -> None:
    """A 3xx is the attempt's answer (a failure, retried), never a second request elsewhere."""
    from aiohttp import web

    hits: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        hits.append(request.path)
        if request.path == "/hook":
            raise web.HTTPFound("/elsewhere")
        return web.Response()

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        connector = GuardedConnector(AllowList(["127.0.0.1"]), socket_factory=Tripwire())
        result = await _post(connector, f"http://127.0.0.1:{port}/hook")
    finally:
        await runner.cleanup()
    assert (result.kind, result.status) == ("3xx", 302)
    assert hits == ["/hook"]
