"""A deterministic OpenAI-compatible Chat Completions server for tests.

Real backends talk to it over a real socket, so the whole HTTP path (headers, SSE framing,
connection reuse, dropped connections) is exercised without any network or credentials. The
behaviour is picked by marker tokens in the LAST user message (or in ``FakeLLM.directive``, for
tests that cannot choose the message text):

- plain text → ``"You said: <text>"`` streamed word by word, ``token_delay`` seconds apart;
- ``[reasoning]`` → ``reasoning_content`` deltas before the text;
- ``[toolcall:NAME]`` → after the text, a streamed call of tool NAME (``finish_reason`` tool_calls);
- ``[terminal:COMMAND]`` → the same, a call of the ``terminal`` tool with ``{"command": COMMAND}``;
- ``[delegate:GOAL]`` → the same, a call of Hermes' ``delegate_task`` tool with ``{"goal": GOAL}``
  (the child agent's own request then carries GOAL as its user message, so it simply answers);
- a conversation whose LAST message is a tool result (an agent's tool loop coming back) →
  ``"Tool said: <the result, first 12 words>"``, with no further tool call;
- ``[error:STATUS]`` → that HTTP status with an OpenAI error body;
- ``[flaky:N]`` → the first N such requests answer 503, later ones succeed;
- ``[stall]`` → one content chunk, then silence until the fake shuts down;
- ``[midfail]`` → a few words, then the connection is dropped mid-stream;
- ``[calls:N]`` with a tool marker → an agent's tool loop N calls long: each answer asks for
  the tool again (ids ``call_fake_1`` … ``call_fake_N``) until the conversation holds N tool
  results after the last user message, then ``"Tool said: …"`` (N + 1 model calls in all);
- ``[length]`` → the output limit: only the reply's first few words (``"You said: <first word>"``,
  ``LENGTH_TOKENS`` tokens), then ``finish_reason: "length"``, with no tool call; an agent's
  request to continue the truncated reply (a last user message starting ``[System:``, as Hermes
  sends) is answered for the ``[length]`` message again, so it stays truncated (Hermes gives up
  after its continuation attempts and reports a partial reply).

``hang = True`` makes the fake accept requests but never answer them (not even headers), and
``received`` is set whenever a request arrives, so a test can act "while the provider is silent".

Every request is recorded (method, path, headers including Authorization, JSON body). The reply
reports ``model`` as requested unless ``actual_model`` is set. With ``expected_key`` set, any other
bearer token gets a 401. ``stream: false`` requests get an ordinary ``chat.completion`` body.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from aiohttp import web

_REASONING = re.compile(r"\[reasoning\]")
_TOOLCALL = re.compile(r"\[toolcall:([A-Za-z0-9_.-]+)\]")
_TERMINAL = re.compile(r"\[terminal:([^\]]+)\]")
_DELEGATE = re.compile(r"\[delegate:([^\]]+)\]")
_ERROR = re.compile(r"\[error:(\d{3})\]")
_FLAKY = re.compile(r"\[flaky:(\d+)\]")
_STALL = re.compile(r"\[stall\]")
_MIDFAIL = re.compile(r"\[midfail\]")
_CALLS = re.compile(r"\[calls:(\d+)\]")
_LENGTH = re.compile(r"\[length\]")
_MARKERS = (
    _REASONING,
    _TOOLCALL,
    _TERMINAL,
    _DELEGATE,
    _ERROR,
    _FLAKY,
    _STALL,
    _MIDFAIL,
    _CALLS,
    _LENGTH,
)
# How many tokens a ``[length]`` reply keeps before its finish_reason "length".
LENGTH_TOKENS = 3
_TOKEN = re.compile(r"\S+\s*")
# An agent's own note in a user message (Hermes: "[System: Your previous response was ...]").
_AGENT_NOTE = re.compile(r"\s*\[System:")


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    client_port: int = 0  # the same port on two requests means a reused keep-alive connection

    @property
    def authorization(self) -> str | None:
        return self.headers.get("Authorization")


def text_of(content: Any) -> str:
    """Plain text of a message's content (a string or a list of content parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict)
        ).strip()
    return ""


class FakeLLM:
    """``async with FakeLLM() as fake:`` serves ``fake.base_url`` until the block ends."""

    def __init__(
        self,
        *,
        token_delay: float = 0.0,
        expected_key: str | None = None,
        actual_model: str | None = None,
        directive: str = "",
        retry_after: float | None = None,
        hang: bool = False,
    ) -> None:
        self.token_delay = token_delay
        self.expected_key = expected_key
        self.actual_model = actual_model
        self.directive = directive
        self.retry_after = retry_after  # sent as Retry-After on [flaky] 503s when set
        self.requests: list[RecordedRequest] = []
        self.usages: list[dict[str, int]] = []
        self.flaky_failures = 0
        self.hang = hang
        self.received = asyncio.Event()
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def last_request(self) -> RecordedRequest:
        return self.requests[-1]

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    async def __aenter__(self) -> FakeLLM:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closing.set()  # releases [stall] handlers so shutdown never waits on them
        if self._runner is not None:
            await self._runner.cleanup()

    async def _pause(self) -> bool:
        """Wait ``token_delay``; True when the fake is shutting down and the stream should end."""
        if self.token_delay > 0 and not self._closing.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.token_delay):
                    await self._closing.wait()
        else:
            await asyncio.sleep(0)  # still one chunk per write, as a real server streams
        return self._closing.is_set()

    def reply_for(self, text: str) -> str:
        """The deterministic reply text for a user message (markers stripped)."""
        return f"You said: {_clean(text)}"

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.actual_model or "fake-model"}]}
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            body = None
        self.requests.append(
            RecordedRequest(
                request.method, request.path, dict(request.headers), body, _client_port(request)
            )
        )
        self.received.set()
        if self.hang:
            await self._closing.wait()
            return _error(503, "the fake LLM is shutting down")  # safe even if the client left
        if self.expected_key is not None:
            if request.headers.get("Authorization") != f"Bearer {self.expected_key}":
                return _error(401, "Incorrect API key provided.", "invalid_api_key")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "'messages' is a required property", "invalid_request")
        users = [m for m in body["messages"] if isinstance(m, dict) and m.get("role") == "user"]
        text = text_of(users[-1].get("content")) if users else ""
        text = _continued_length_turn(users) or text
        scan = f"{self.directive} {text}"
        if status := _ERROR.search(scan):
            return _error(int(status.group(1)), f"fake provider error {status.group(1)}")
        if (flaky := _FLAKY.search(scan)) and self.flaky_failures < int(flaky.group(1)):
            self.flaky_failures += 1
            headers = {"Retry-After": f"{self.retry_after:g}"} if self.retry_after else None
            return _error(503, "The server is overloaded, try again.", headers=headers)

        model = self.actual_model or str(body.get("model") or "fake-model")
        last = body["messages"][-1] if body["messages"] else {}
        tool_came_back = isinstance(last, dict) and last.get("role") == "tool"
        if tool_came_back:
            words = text_of(last.get("content")).split()[:12]
            tokens = _TOKEN.findall(f"Tool said: {' '.join(words)}")
        else:
            tokens = _TOKEN.findall(self.reply_for(text))
        reasoning = (
            _TOKEN.findall(f"Thinking about: {_clean(text)}") if _REASONING.search(scan) else []
        )
        results = _results_since_user(body["messages"])
        loop = _CALLS.search(scan)
        wanted = int(loop.group(1)) if loop else 1
        tool = None if results >= wanted else _tool_call(scan, text, results + 1)
        if tool and tool_came_back:  # the loop goes on: a step of its own, not the reply
            tokens = _TOKEN.findall(f"Step {results + 1}.")
        finish = "tool_calls" if tool else "stop"
        if _LENGTH.search(scan) and not tool_came_back:
            tokens, tool, finish = tokens[:LENGTH_TOKENS], None, "length"
        prompt = sum(len(text_of(m.get("content")).split()) for m in body["messages"])
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": len(tokens) + len(reasoning),
            "total_tokens": prompt + len(tokens) + len(reasoning),
        }
        self.usages.append(usage)
        if not body.get("stream"):
            if _STALL.search(scan):
                await self._closing.wait()
            if _MIDFAIL.search(scan) and request.transport is not None:
                request.transport.close()
            message: dict[str, Any] = {"role": "assistant", "content": "".join(tokens)}
            if reasoning:
                message["reasoning_content"] = "".join(reasoning)
            if tool:
                message["tool_calls"] = [_call(tool[0], tool[1], tool[2])]
            return web.json_response(
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "finish_reason": finish,
                        }
                    ],
                    "usage": usage,
                }
            )
        return await self._stream(
            request, body, scan, model, tokens, reasoning, tool, usage, finish
        )

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        scan: str,
        model: str,
        tokens: list[str],
        reasoning: list[str],
        tool: tuple[str, str] | None,
        usage: dict[str, int],
        finish: str,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)

        async def send(delta: dict[str, Any], finish: str | None = None) -> None:
            chunk = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await send({"role": "assistant", "content": ""})
        for index, piece in enumerate(reasoning):
            if index and await self._pause():
                return response
            await send({"reasoning_content": piece})
        for index, token in enumerate(tokens):
            if (index or reasoning) and await self._pause():
                return response
            await send({"content": token})
            if _STALL.search(scan):
                await self._closing.wait()
                return response
            if _MIDFAIL.search(scan) and index + 1 >= min(2, len(tokens)):
                # Let the client read what was sent: aiohttp discards buffered bytes once the
                # connection error is recorded, and the test wants "output, then failure".
                await asyncio.sleep(0.05)
                if request.transport is not None:
                    request.transport.close()  # no terminating chunk: the client sees a cut
                return response
        if tool:
            name, arguments, number = tool
            call = _call(name, "", number)
            await send({"tool_calls": [{"index": 0, **call}]})
            half = len(arguments) // 2
            for part in (arguments[:half], arguments[half:]):
                await send({"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
        await send({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            final = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [],
                "usage": usage,
            }
            await response.write(f"data: {json.dumps(final)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _tool_call(scan: str, text: str, number: int) -> tuple[str, str, int] | None:
    """The (name, JSON arguments, call number) of the tool call a marker asks for, if any."""
    if command := _TERMINAL.search(scan):
        return "terminal", json.dumps({"command": command.group(1)}), number
    if goal := _DELEGATE.search(scan):
        return "delegate_task", json.dumps({"goal": goal.group(1).strip()}), number
    if tool := _TOOLCALL.search(scan):
        return tool.group(1), json.dumps({"query": _clean(text)}), number
    return None


def _results_since_user(messages: list[Any]) -> int:
    """Tool results after the conversation's last user message: the agent's loop so far."""
    count = 0
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") == "user":
            break
        count += message.get("role") == "tool"
    return count


def _continued_length_turn(users: list[dict[str, Any]]) -> str | None:
    """The user's ``[length]`` message when the last user message is an agent's note asking to
    continue a truncated reply (``[System: ...]``, as Hermes sends after ``finish_reason:
    "length"``): the continuation is truncated too, as a real output limit would be."""
    texts = [text_of(m.get("content")) for m in users]
    if not texts or not _AGENT_NOTE.match(texts[-1]):
        return None
    asked = next((t for t in reversed(texts) if not _AGENT_NOTE.match(t)), "")
    return asked if _LENGTH.search(asked) else None


def _client_port(request: web.Request) -> int:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return int(peer[1]) if peer else 0


def _clean(text: str) -> str:
    for marker in _MARKERS:
        text = marker.sub(" ", text)
    return " ".join(text.split())


def _call(name: str, arguments: str, number: int = 1) -> dict[str, Any]:
    return {
        "id": f"call_fake_{number}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _error(
    status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None
) -> web.Response:
    """An OpenAI-shaped error body, so backends can surface the provider's own message."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": code}},
        status=status,
        headers=headers,
    )
