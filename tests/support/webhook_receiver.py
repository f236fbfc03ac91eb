"""A webhook receiver for the tests and the chaos bench: a real aiohttp server on 127.0.0.1 that
verifies every delivery with the ``standardwebhooks`` package's own ``Webhook.verify`` (a
verifier nobody here wrote), once per configured secret, and answers as it is told.

``answers`` are the statuses (with headers) of the next requests, in order (200 after them);
``hold()`` keeps every request that arrives open until ``release()``, so a test can act on a
sender while an attempt is in flight (``held`` says one arrived).
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from standardwebhooks import Webhook


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


@dataclass(frozen=True)
class Received:
    webhook_id: str
    timestamp: str
    signatures: list[str]
    body: dict[str, Any]
    raw: bytes
    # Every secret's verification passed.
    verified: bool
    path: str


@dataclass
class Receiver:
    secrets: list[str]
    url: str = ""
    received: list[Received] = field(default_factory=list)
    answers: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    arrivals: asyncio.Queue[Received] = field(default_factory=asyncio.Queue)
    held: asyncio.Event = field(default_factory=asyncio.Event)
    # Seconds each answer waits (a slow receiver: attempts are in flight longer).
    delay: float = 0.0
    _gate: asyncio.Event | None = None

    def hold(self) -> None:
        self._gate = asyncio.Event()
        self.held.clear()

    def release(self) -> None:
        if self._gate is not None:
            self._gate.set()
        self._gate = None

    def verified_ids(self) -> set[str]:
        return {r.webhook_id for r in self.received if r.verified}

    def of_run(self, run_id: str) -> list[Received]:
        return [r for r in self.received if r.body.get("run_id") == run_id]

    async def next(self, within: float = 20.0) -> Received:
        return await asyncio.wait_for(self.arrivals.get(), within)

    def _verify(self, raw: bytes, headers: dict[str, str]) -> bool:
        try:
            for secret in self.secrets:
                Webhook(secret).verify(raw, headers)
        except Exception:
            return False
        return bool(self.secrets)

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        headers = dict(request.headers)
        got = Received(
            webhook_id=headers.get("webhook-id", ""),
            timestamp=headers.get("webhook-timestamp", ""),
            signatures=headers.get("webhook-signature", "").split(),
            body=json.loads(raw) if raw else {},
            raw=raw,
            verified=self._verify(raw, headers),
            path=request.path,
        )
        self.received.append(got)
        self.arrivals.put_nowait(got)
        gate = self._gate
        if gate is not None:
            self.held.set()
            await gate.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        status, extra = self.answers.pop(0) if self.answers else (200, {})
        return web.Response(status=status, headers=extra)


@asynccontextmanager
async def receiving(secrets: list[str], host: str = "127.0.0.1") -> AsyncIterator[Receiver]:
    receiver = Receiver(secrets)
    app = web.Application()
    app.router.add_post("/{tail:.*}", receiver.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    receiver.url = f"http://{host}:{port}/hooks"
    try:
        yield receiver
    finally:
        receiver.release()
        await runner.cleanup()
