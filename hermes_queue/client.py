"""A small async Python client whose event iterator resumes by itself.

``iter_events`` follows a run with ``Last-Event-ID``: when the connection drops (a replica
restarts, a load balancer cuts an idle stream, the network blips) it reconnects and continues
after the last event it yielded, so the caller sees every event exactly once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

TERMINAL = frozenset({"run.completed", "run.failed", "run.cancelled"})


class ClientError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


class Unreachable(ClientError):
    """No connection to the API could be made at all (nothing listens, wrong host): resuming
    cannot help a stream that never started, so ``iter_events`` gives up early."""

    def __init__(self, base_url: str, reason: str) -> None:
        super().__init__(0, reason)
        self.base_url = base_url
        self.reason = reason

    def __str__(self) -> str:
        return f"no API answers at {self.base_url} ({self.reason})"


@dataclass
class SSEFrame:
    id: str = ""
    event: str = ""
    data: str = ""
    comment: str = ""

    def json(self) -> Any:
        return json.loads(self.data)


async def iter_sse(response: aiohttp.ClientResponse) -> AsyncIterator[SSEFrame]:
    """Parse an SSE body into frames (comments included, so callers can see ``stream closed``)."""
    frame = SSEFrame()
    data_lines: list[str] = []
    async for raw in response.content:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data_lines or frame.comment:
                frame.data = "\n".join(data_lines)
                yield frame
            frame, data_lines = SSEFrame(), []
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "":
            frame.comment = value
        elif name == "data":
            data_lines.append(value)
        elif name == "id":
            frame.id = value
        elif name == "event":
            frame.event = value


@dataclass
class HermesQueueClient:
    base_url: str
    api_key: str = ""
    max_reconnects: int = 50
    reconnect_delay: float = 0.2
    # Give up following a run after this many seconds without ever connecting (None: retry as
    # for a dropped stream); and how long one connection attempt may take.
    give_up_unreached: float | None = None
    connect_timeout: float = 10.0
    session: aiohttp.ClientSession | None = field(default=None, repr=False)

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return {**headers, **(extra or {})}

    async def __aenter__(self) -> HermesQueueClient:
        self.session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout)
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.session is not None:
            await self.session.close()

    @property
    def _http(self) -> aiohttp.ClientSession:
        if self.session is None:
            raise RuntimeError("use 'async with HermesQueueClient(...)'")
        return self.session

    async def _json(self, method: str, path: str, body: Any = None) -> Any:
        async with self._http.request(
            method, self.base_url + path, json=body, headers=self._headers()
        ) as response:
            payload = await response.json(content_type=None)
            if response.status >= 400:
                raise ClientError(response.status, payload)
            return payload

    async def create_run(self, input: Any, **fields: Any) -> str:
        payload = await self._json("POST", "/v1/runs", {"input": input, **fields})
        return str(payload["run_id"])

    async def get_run(self, run_id: str) -> dict[str, Any]:
        return dict(await self._json("GET", f"/v1/runs/{run_id}"))

    async def stop_run(self, run_id: str) -> dict[str, Any]:
        return dict(await self._json("POST", f"/v1/runs/{run_id}/stop"))

    async def steer_run(self, run_id: str, text: str) -> dict[str, Any]:
        """Guidance for the running turn, applied at its agent's next tool result."""
        return dict(await self._json("POST", f"/v1/runs/{run_id}/steer", {"input": text}))

    async def iter_events(
        self, run_id: str, after: str | None = None
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Yield ``(event_id, payload)`` until the run's terminal event, resuming on drops.
        Raises :class:`Unreachable` once ``give_up_unreached`` seconds passed without any
        connection to the API."""
        cursor, failures = after, 0
        started, reached = time.monotonic(), False
        while True:
            headers = self._headers({"Last-Event-ID": cursor} if cursor else None)
            try:
                async with self._http.get(
                    f"{self.base_url}/v1/runs/{run_id}/events", headers=headers
                ) as response:
                    reached = True
                    if 400 <= response.status < 500:
                        raise ClientError(response.status, await response.json(content_type=None))
                    if response.status >= 500:  # a replica or Redis is away: retry
                        raise aiohttp.ClientConnectionError(f"HTTP {response.status}")
                    async for frame in iter_sse(response):
                        if frame.comment == "stream closed":
                            return
                        if not frame.data:
                            continue
                        payload = frame.json()
                        if frame.id:
                            cursor = frame.id
                        failures = 0
                        yield frame.id, payload
                        if payload.get("event") in TERMINAL:
                            return
            except (TimeoutError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
                waited = time.monotonic() - started
                if not reached and self.give_up_unreached is not None:
                    if waited >= self.give_up_unreached:
                        raise Unreachable(self.base_url, _reason(exc)) from None
            failures += 1
            if failures > self.max_reconnects:
                raise ClientError(0, f"gave up following {run_id} after {failures} reconnects")
            await asyncio.sleep(min(self.reconnect_delay * failures, 2.0))


def _reason(exc: BaseException) -> str:
    """Why a connection failed, in a few words (``connection refused``, ``timed out``)."""
    if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        return "timed out"
    cause = getattr(exc, "os_error", None) or exc.__cause__ or exc
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused"
    text = getattr(cause, "strerror", None) or str(cause) or type(cause).__name__
    return str(text).lower()
