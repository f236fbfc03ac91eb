"""One HTTP request and what came back, recorded the same way from either server.

A ``Side`` is one server under test (upstream's or ours). A script calls ``side.call(...)``;
every call is recorded as an ``Exchange`` on the side (status, the headers that matter, a JSON
or text body, or an SSE body parsed frame by frame, keepalive comments dropped since they
depend on timing only), so the comparer sees both servers' answers to the same script.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp

# Response headers a client acts on; the rest (Date, Server, security headers, our own
# additions such as X-Hermes-Run-Id) are not compared.
COMPARED_HEADERS = (
    "Content-Type",
    "Cache-Control",
    "X-Accel-Buffering",
    "X-Hermes-Session-Id",
    "X-Hermes-Session-Key",
    "X-Hermes-Completed",
    "X-Hermes-Partial",
    "X-Hermes-Error",
)
SSE_HEADERS = ("Cache-Control", "X-Accel-Buffering")  # compared on streams only
READ_TIMEOUT = 60.0


@dataclass
class Frame:
    """One SSE frame: ``event`` and ``id`` lines (None when absent), the data (parsed JSON, or
    the raw text such as ``[DONE]``), or a comment (``: stream closed``)."""

    event: str | None = None
    data: Any = None
    id: str | None = None
    comment: str | None = None

    @property
    def name(self) -> str:
        """What the frame is, for alignment and messages: the event name, the runs dialect's
        ``event`` field, the chat chunk's kind, or the comment / raw data."""
        if self.comment is not None:
            return f": {self.comment}"
        if self.event is not None:
            return self.event
        if isinstance(self.data, dict):
            if "event" in self.data:
                return str(self.data["event"])
            if self.data.get("object") == "chat.completion.chunk":
                return _chunk_kind(self.data)
        return str(self.data)


@dataclass
class Exchange:
    label: str  # "POST /api/sessions/{sid}/chat/stream": the request, ids left as names
    status: int
    headers: dict[str, str]
    body: Any = None  # JSON, or the text of a non-JSON body
    frames: list[Frame] | None = None  # set for text/event-stream responses
    request: Any = None  # the JSON body sent, for allowlist entries that depend on it

    @property
    def json(self) -> Any:
        return self.body


@dataclass
class Side:
    """One server: its base URL and key, and everything a script has exchanged with it."""

    name: str
    base_url: str
    api_key: str
    http: aiohttp.ClientSession
    exchanges: list[Exchange] = field(default_factory=list)

    async def call(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: bytes | str | None = None,
        headers: dict[str, str] | None = None,
        auth: str | None = "default",
        label: str | None = None,
        record: bool = True,
    ) -> Exchange:
        """Send one request, read the whole answer (a stream to its end) and record it.
        ``auth`` is the bearer token to send: the side's key by default, None for none."""
        sent = dict(headers or {})
        token = self.api_key if auth == "default" else auth
        if token:
            sent["Authorization"] = f"Bearer {token}"
        kwargs: dict[str, Any] = {"headers": sent}
        if json_body is not None:
            kwargs["json"] = json_body
        elif data is not None:
            kwargs["data"] = data
        async with asyncio.timeout(READ_TIMEOUT):
            async with self.http.request(method, self.base_url + path, **kwargs) as response:
                exchange = await _read(label or f"{method} {path}", response)
        exchange.request = json_body
        if record:
            self.exchanges.append(exchange)
        return exchange

    async def stream(
        self, method: str, path: str, *, json_body: Any = None, label: str | None = None
    ) -> OpenStream:
        """Open a stream to read frame by frame (to act mid-stream, e.g. stop the run);
        ``await stream.finish()`` reads the rest and records the whole exchange."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        response = await self.http.request(
            method, self.base_url + path, json=json_body, headers=headers
        )
        return OpenStream(self, label or f"{method} {path}", response, json_body)


class OpenStream:
    def __init__(
        self, side: Side, label: str, response: aiohttp.ClientResponse, request: Any
    ) -> None:
        self.side, self.label, self.response, self.request = side, label, response, request
        self._raw = b""

    async def until(self, predicate: Any) -> Frame:
        """Read until a frame satisfies ``predicate``; that frame."""
        async with asyncio.timeout(READ_TIMEOUT):
            while True:
                text = self._raw.decode("utf-8", errors="replace").replace("\r\n", "\n")
                for frame in parse_sse(text[: text.rfind("\n\n") + 1]):  # whole frames only
                    if predicate(frame):
                        return frame
                chunk = await self.response.content.readany()
                if not chunk:
                    raise AssertionError(f"{self.side.name}: {self.label} ended first")
                self._raw += chunk

    async def finish(self) -> Exchange:
        async with asyncio.timeout(READ_TIMEOUT):
            self._raw += await self.response.content.read()
        self.response.release()
        exchange = _exchange(self.label, self.response, self._raw)
        exchange.request = self.request
        self.side.exchanges.append(exchange)
        return exchange


async def _read(label: str, response: aiohttp.ClientResponse) -> Exchange:
    return _exchange(label, response, await response.read())


def _exchange(label: str, response: aiohttp.ClientResponse, raw: bytes) -> Exchange:
    is_stream = response.content_type == "text/event-stream"
    wanted = (
        COMPARED_HEADERS
        if is_stream
        else tuple(h for h in COMPARED_HEADERS if h not in SSE_HEADERS)
    )
    headers = {name: response.headers[name] for name in wanted if name in response.headers}
    text = raw.decode("utf-8", errors="replace")
    if is_stream:
        return Exchange(label, response.status, headers, frames=parse_sse(text))
    body: Any = text
    if response.content_type == "application/json":
        try:
            body = json.loads(text)
        except ValueError:
            pass
    return Exchange(label, response.status, headers, body=body)


def parse_sse(text: str) -> list[Frame]:
    """Frames of a complete SSE body; ``: keepalive`` comments are dropped."""
    frames: list[Frame] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        if not block.strip():
            continue
        frame, data_lines = Frame(), []
        for line in block.split("\n"):
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
        if data_lines:
            raw = "\n".join(data_lines)
            try:
                frame.data = json.loads(raw)
            except ValueError:
                frame.data = raw
        if frame.comment == "keepalive" and not data_lines:
            continue
        frames.append(frame)
    return frames


def _chunk_kind(chunk: dict[str, Any]) -> str:
    """A chat completion chunk named by what it carries: role, content, reasoning, tool calls,
    or the final chunk (its finish reason)."""
    choices = chunk.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    delta = choice.get("delta") or {}
    if choice.get("finish_reason"):
        return f"chunk.finish:{choice['finish_reason']}"
    for kind in ("role", "content", "reasoning_content", "tool_calls"):
        if kind in delta:
            return f"chunk.{kind}"
    return "chunk.empty"
