"""The deterministic OpenAI-compatible Chat Completions server of the tests and the benchmarks.

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
  the tool again (ids ``call_fake_1`` … ``call_fake_N``, after a ``"Step k."`` text) until the
  conversation holds N tool results after the last user message, then ``"Tool said: …"``
  (N + 1 model calls in all);
- ``[length]`` → the output limit: only the reply's first few words (``"You said: <first word>"``,
  ``LENGTH_TOKENS`` tokens), then ``finish_reason: "length"``, with no tool call; an agent's
  request to continue the truncated reply (a last user message starting ``[System:``, as Hermes
  sends) is answered for the ``[length]`` message again, so it stays truncated (Hermes gives up
  after its continuation attempts and reports a partial reply).

``hang = True`` makes the fake accept requests but never answer them (not even headers), and
``received`` is set whenever a request arrives, so a test can act "while the provider is silent".
``hold`` (a predicate on the request body) holds the first request it matches, unanswered, and
sets ``held``, until ``release_held`` is set (or the fake shuts down): a state the agent cannot
leave on its own, e.g. to kill its worker while that one model call is in flight.

Every request is recorded (method, path, headers including Authorization, JSON body) unless
``record`` is off. The reply reports ``model`` as requested unless ``actual_model`` is set. With
``expected_key`` set, any other bearer token gets a 401. ``stream: false`` requests get an
ordinary ``chat.completion`` body. ``counts`` (also served as ``GET /_stats``) counts requests
per path and chat requests per tool set offered (``tools=N:<hash>``); any path but the chat and
model routes answers 404.

Benchmarks use :meth:`FakeLLM.for_benchmarks` (in a process of its own:
``fake_llm_process.py``): every reply is the same 20 tokens ending in ``FIXED_MARKER`` + the
number of user messages (markers are not read), each token after ``token_delay`` (the first
too), nothing recorded, and ``GET /version`` answered as vLLM answers it (Hermes probes a
loopback endpoint for its server type on every agent it builds until one probe succeeds).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any

from aiohttp import web

from tests.support import llm_replies as replies
from tests.support.llm_replies import FIXED_MARKER, FIXED_WORDS, LENGTH_TOKENS, Reply, text_of

__all__ = [
    "BENCH_MODEL",
    "FIXED_MARKER",
    "FIXED_WORDS",
    "LENGTH_TOKENS",
    "FakeLLM",
    "RecordedRequest",
    "text_of",
]

BENCH_MODEL = "bench-model"


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
        fixed_reply: bool = False,
        record: bool = True,
        model: str = "fake-model",
        vllm_version: bool = False,
        port: int = 0,
        log: str = "",
        hold: Callable[[Any], bool] | None = None,
    ) -> None:
        self.token_delay = token_delay
        self.hold = hold
        self.held = asyncio.Event()
        self.release_held = asyncio.Event()
        self.expected_key = expected_key
        self.actual_model = actual_model
        self.directive = directive
        self.retry_after = retry_after  # sent as Retry-After on [flaky] 503s when set
        self.hang = hang
        self.fixed_reply = fixed_reply
        self.record = record
        self.model = model
        self.vllm_version = vllm_version
        self.requests: list[RecordedRequest] = []
        self.usages: list[dict[str, int]] = []
        self.counts: Counter[str] = Counter()
        self.flaky_failures = 0
        self.received = asyncio.Event()
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        # One line per chat request appended to ``log``, when set (closed when the server stops).
        self._log: IO[str] | None = open(log, "a", buffering=1) if log else None
        self.port = port

    @classmethod
    def for_benchmarks(cls, token_delay: float = 0.0, *, port: int = 0, log: str = "") -> FakeLLM:
        return cls(
            token_delay=token_delay,
            fixed_reply=True,
            record=False,
            model=BENCH_MODEL,
            vllm_version=True,
            port=port,
            log=log,
        )

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
        app = web.Application(client_max_size=64 * 2**20)  # an agent's whole history, tools too
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        if self.vllm_version:
            app.router.add_get("/version", self._version)
        app.router.add_get("/_stats", self._stats)
        app.router.add_route("*", "/{tail:.*}", self._other)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, backlog=1024)
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
        if self._log is not None:
            self._log.close()

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
        return replies.reply_for(text)

    async def _models(self, request: web.Request) -> web.Response:
        self.counts[request.path] += 1
        model = {"id": self.actual_model or self.model, "object": "model", "owned_by": "fake"}
        return web.json_response({"object": "list", "data": [model]})

    async def _version(self, request: web.Request) -> web.Response:
        self.counts[f"{request.method} {request.path}"] += 1
        return web.json_response({"version": "0.0.0-fake"})

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(dict(self.counts))

    async def _other(self, request: web.Request) -> web.Response:
        self.counts[f"{request.method} {request.path}"] += 1
        return web.json_response({"error": {"message": "not found"}}, status=404)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.counts[request.path] += 1
        try:
            body = await request.json()
        except ValueError:
            body = None
        if self.record:
            headers, port = dict(request.headers), _client_port(request)
            self.requests.append(RecordedRequest(request.method, request.path, headers, body, port))
        self.received.set()
        if self.hold is not None and not self.held.is_set() and self.hold(body):
            self.held.set()
            await _first(self.release_held, self._closing)
        if self.hang:
            await self._closing.wait()
            return replies.error(503, "the fake LLM is shutting down")  # even if the client left
        if self.expected_key is not None:
            if request.headers.get("Authorization") != f"Bearer {self.expected_key}":
                return replies.error(401, "Incorrect API key provided.", "invalid_api_key")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return replies.error(400, "'messages' is a required property", "invalid_request")
        self.counts[replies.tool_set(body)] += 1
        messages: list[Any] = body["messages"]
        self._log_request(body)
        text = replies.last_user_text(messages)
        scan = f"{self.directive} {text}"
        if status := replies.ERROR.search(scan):
            return replies.error(int(status.group(1)), f"fake provider error {status.group(1)}")
        if (flaky := replies.FLAKY.search(scan)) and self.flaky_failures < int(flaky.group(1)):
            self.flaky_failures += 1
            retry = {"Retry-After": f"{self.retry_after:g}"} if self.retry_after else None
            return replies.error(503, "The server is overloaded, try again.", headers=retry)

        model = self.actual_model or str(body.get("model") or self.model)
        if self.fixed_reply:
            reply = replies.fixed_reply(messages)
        else:
            reply = replies.marked_reply(messages, text, scan)
        usage = replies.usage_of(messages, reply)
        if self.record:
            self.usages.append(usage)
        if body.get("stream"):
            return await self._stream(request, body, scan, model, reply, usage)
        if replies.STALL.search(scan):
            await self._closing.wait()
        if replies.MIDFAIL.search(scan) and request.transport is not None:
            request.transport.close()
        message: dict[str, Any] = {"role": "assistant", "content": "".join(reply.tokens)}
        if reply.reasoning:
            message["reasoning_content"] = "".join(reply.reasoning)
        if reply.tool:
            message["tool_calls"] = [replies.call(*reply.tool)]
        choice = {"index": 0, "message": message, "finish_reason": reply.finish}
        return web.json_response(
            {**_envelope("chat.completion", model), "choices": [choice], "usage": usage}
        )

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        scan: str,
        model: str,
        reply: Reply,
        usage: dict[str, int],
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)

        async def send(delta: dict[str, Any], finish: str | None = None) -> None:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            await _write(
                response, {**_envelope("chat.completion.chunk", model), "choices": [choice]}
            )

        await send({"role": "assistant", "content": ""})
        for index, piece in enumerate(reply.reasoning):
            if index and await self._pause():
                return response
            await send({"reasoning_content": piece})
        # A fixed reply pays the delay before its first token too: its time to first token.
        lead = bool(reply.reasoning) or self.fixed_reply
        for index, token in enumerate(reply.tokens):
            if (index or lead) and await self._pause():
                return response
            await send({"content": token})
            if replies.STALL.search(scan):
                await self._closing.wait()
                return response
            if replies.MIDFAIL.search(scan) and index + 1 >= min(2, len(reply.tokens)):
                # Let the client read what was sent: aiohttp discards buffered bytes once the
                # connection error is recorded, and the test wants "output, then failure".
                await asyncio.sleep(0.05)
                if request.transport is not None:
                    request.transport.close()  # no terminating chunk: the client sees a cut
                return response
        if reply.tool:
            name, arguments, number = reply.tool
            await send({"tool_calls": [{"index": 0, **replies.call(name, "", number)}]})
            half = len(arguments) // 2
            for part in (arguments[:half], arguments[half:]):
                await send({"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
        await send({}, reply.finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            final = {**_envelope("chat.completion.chunk", model), "choices": [], "usage": usage}
            await _write(response, final)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _log_request(self, body: dict[str, Any]) -> None:
        if self._log is None:
            return
        messages = body["messages"]
        roles = "".join(str(m.get("role") or "?")[0] for m in messages if isinstance(m, dict))
        last = str(messages[-1].get("content"))[:80] if messages else ""
        tools = ",".join(replies.tool_names(body))
        stream = bool(body.get("stream"))
        print(f"stream={stream} roles={roles} tools={tools} last={last!r}", file=self._log)


async def _first(*events: asyncio.Event) -> None:
    """Wait until any of ``events`` is set."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def _envelope(kind: str, model: str) -> dict[str, Any]:
    return {"id": "chatcmpl-fake", "object": kind, "created": int(time.time()), "model": model}


async def _write(response: web.StreamResponse, chunk: dict[str, Any]) -> None:
    await response.write(f"data: {json.dumps(chunk)}\n\n".encode())


def _client_port(request: web.Request) -> int:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return int(peer[1]) if peer else 0
