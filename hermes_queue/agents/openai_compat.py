"""The ``openai`` backend: one streamed Chat Completions call per turn, to any compatible endpoint.

- One ``aiohttp.ClientSession`` and TLS context per backend, created lazily and reused by every
  turn: upstream rebuilds HTTP clients and TLS contexts per turn, most of its per-turn CPU.
- Every network wait races the turn's ``CancelToken`` and a stall timeout, so a stop lands within
  milliseconds and a silent upstream fails the turn instead of hanging the worker.
- Transient failures (408, 429, 5xx, connection errors, timeouts) are retried with exponential
  backoff only while nothing was streamed; after a delta went out a retry would duplicate output.
- Error text reaches clients: it quotes the provider's message with the API key scrubbed out.
- Tools are not executed here. A streamed tool call is reported honestly as a failed tool
  (``tool_started``, then ``tool_completed`` with ``error=True``), recorded as an assistant
  ``tool_calls`` message plus a ``tool`` message saying tools are unavailable, and the turn ends
  with the text streamed so far. Tool loops are the ``hermes`` backend's job.
- ``model_options``: ``reasoning.effort``/``reasoning_effort`` → ``reasoning_effort``,
  ``service_tier`` as is; only set keys are sent (``fast`` has no Chat Completions equivalent).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp

from hermes_queue.agents.base import (
    AgentError,
    AgentRequest,
    AgentResult,
    CancelToken,
    EventSink,
    ProviderAuthError,
    TurnCancelled,
    Usage,
)
from hermes_queue.agents.provider_config import ProviderConfig, provider_configs, with_credentials
from hermes_queue.tracing.context import current_turn

if TYPE_CHECKING:
    from hermes_queue.tracing.context import ModelCallSpan

T = TypeVar("T")

TOOLS_UNAVAILABLE = "tool execution is not available in the openai backend"
_RETRYABLE_STATUS = frozenset({408, 429})


class _Transient(Exception):
    """A failure worth retrying, provided nothing has been streamed yet."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class OpenAICompatBackend:
    """Runs a turn as one streamed ``POST {base_url}/chat/completions``."""

    name = "openai"

    def __init__(
        self,
        providers: Mapping[str, ProviderConfig],
        default_provider: str,
        *,
        backoff: float = 0.5,
        max_retry_after: float = 10.0,
        credentials: Callable[[str], str] | None = None,
    ) -> None:
        if default_provider not in providers:
            raise ValueError(f"default provider {default_provider!r} is not configured")
        self.providers = dict(providers)
        # Resolves a provider's key when a turn starts (the worker's settings); a failure is
        # the turn's ProviderAuthError, so only the provider the turn runs on is ever asked.
        self.credentials = credentials
        self.default_provider = default_provider
        self.backoff = backoff
        self.max_retry_after = max_retry_after
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ssl: ssl.SSLContext | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> OpenAICompatBackend:
        """Build from ``load_backend("openai", providers=..., default_provider=...)`` options."""
        providers = provider_configs(options)
        default = options.get("default_provider") or next(iter(providers), "")
        extra = {k: float(options[k]) for k in ("backoff", "max_retry_after") if k in options}
        return cls(providers, default, credentials=options.get("credentials"), **extra)

    async def run_turn(
        self, request: AgentRequest, sink: EventSink, cancel: CancelToken
    ) -> AgentResult:
        provider_name = request.route.provider or self.default_provider
        provider = self.providers.get(provider_name)
        if provider is None:
            raise AgentError(f"unknown provider {provider_name!r}")
        provider = with_credentials(provider, self.credentials)
        model = request.route.model
        if not model:
            raise AgentError("no model was resolved for this turn")
        payload = json.dumps(_body(request, model)).encode()
        session = self._client()
        stop = asyncio.ensure_future(cancel.wait())
        try:
            for attempt in range(provider.max_retries + 1):
                if cancel.cancelled:
                    raise TurnCancelled(cancel.reason)
                turn = _Attempt(provider, model, sink, cancel, stop)
                try:
                    await turn.run(session, payload)
                    return await turn.finish()
                except _Transient as exc:
                    message = provider.scrub(f"provider {provider.name!r}: {exc}")
                    if turn.streamed:  # output already went out: a retry would duplicate it
                        raise AgentError(message) from None
                    if attempt == provider.max_retries:
                        raise AgentError(
                            f"{message} (gave up after {attempt + 1} attempts)"
                        ) from None
                    delay = exc.retry_after
                    delay = self.backoff * 2**attempt if delay is None else delay
                    await cancel.sleep(min(delay, self.max_retry_after))
            raise AssertionError("unreachable: the last attempt returns or raises")
        finally:
            stop.cancel()

    async def aclose(self) -> None:
        """Close the shared session (and its pooled connections) at worker shutdown."""
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    def _client(self) -> aiohttp.ClientSession:
        """The shared session; a new one only if it was closed or the event loop changed."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            self._ssl = self._ssl or ssl.create_default_context()
            connector = aiohttp.TCPConnector(ssl=self._ssl, limit=0, ttl_dns_cache=300)
            # No session-wide timeout: aiohttp's default (300 s in all) would cut long streams.
            self._session = aiohttp.ClientSession(connector=connector)
            self._loop = loop
        return self._session


def _body(request: AgentRequest, model: str) -> dict[str, Any]:
    """The Chat Completions request: system, history, user turn, and the set model options."""
    messages: list[dict[str, Any]] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    for item in request.history:
        if item.get("role"):  # client-only keys (timestamp, reasoning, tool_name) stay behind
            message = {"role": item["role"], "content": item.get("content") or ""}
            message.update({k: item[k] for k in ("tool_calls", "tool_call_id") if item.get(k)})
            messages.append(message)
    messages.append({"role": "user", "content": request.message})
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": True}
    body["stream_options"] = {"include_usage": True}  # usage arrives in the last chunk
    options = request.route.model_options
    if options:
        reasoning = options.get("reasoning")
        effort = reasoning.get("effort") if isinstance(reasoning, Mapping) else reasoning
        effort = options.get("reasoning_effort") or effort
        if isinstance(effort, str) and effort:
            body["reasoning_effort"] = effort
        if options.get("service_tier"):
            body["service_tier"] = options["service_tier"]
    return body


@dataclass(eq=False)
class _Attempt:
    """One HTTP request and what its stream accumulated."""

    provider: ProviderConfig
    model: str
    sink: EventSink
    cancel: CancelToken
    stop: asyncio.Future[None]
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tools: dict[int, dict[str, str]] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    reported_model: str = ""
    finish_reason: str = ""
    done: bool = False
    streamed: bool = False  # something reached the sink: retrying would duplicate output
    call: ModelCallSpan | None = None  # its span, when the worker traces (hermes_queue/tracing/)

    async def run(self, session: aiohttp.ClientSession, payload: bytes) -> None:
        """Send the request and read its stream; ``_Transient`` for what a retry might fix."""
        turn = current_turn()
        if turn is None:
            return await self._request(session, payload)
        self.call = call = turn.model_call(self.model)
        try:
            await self._request(session, payload)
        except BaseException as exc:
            call.failed(type(exc).__name__)
            raise
        reasons = [self.finish_reason] if self.finish_reason else None
        call.answered(
            self.usage.input_tokens,
            self.usage.output_tokens,
            model=self.reported_model,
            finish_reasons=reasons,
        )

    async def _request(self, session: aiohttp.ClientSession, payload: bytes) -> None:
        provider = self.provider
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if provider.api_key:
            headers["Authorization"] = f"Bearer {provider.api_key}"
        url = f"{provider.base_url}/chat/completions"
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=provider.timeout)
        posting = session.post(url, data=payload, headers=headers, timeout=timeout)
        try:
            response = await self._race(posting, "did not respond")
        except (aiohttp.ClientError, OSError) as exc:
            raise _Transient(f"connection failed: {exc}") from None
        complete = False
        try:
            if response.status >= 400:
                await self._raise_for_status(response)
            await self._consume(response)
            complete = True
        except (aiohttp.ClientError, OSError) as exc:
            raise _Transient(f"connection lost: {exc or type(exc).__name__}") from None
        finally:
            # An unfinished stream must not go back to the pool: drop its connection instead.
            if complete:
                response.release()
            else:
                response.close()

    async def _race(self, awaitable: Awaitable[T], what: str) -> T:
        """Await network I/O, but give up as soon as the turn is stopped or the provider stalls."""
        task, done = asyncio.ensure_future(awaitable), set[asyncio.Future[Any]]()
        try:
            done, _ = await asyncio.wait(
                (task, self.stop), timeout=self.provider.timeout, return_when="FIRST_COMPLETED"
            )
        finally:
            if task not in done:  # stopped, stalled or cancelled: abandon the I/O, close leftovers
                task.cancel()
                task.add_done_callback(_discard)
        if task in done:
            return task.result()
        if self.stop in done:
            raise TurnCancelled(self.cancel.reason)
        raise _Transient(f"provider stream stalled: {what} within {self.provider.timeout:g} s")

    async def _raise_for_status(self, response: aiohttp.ClientResponse) -> None:
        """Turn an HTTP error into the right exception, quoting the provider's own message."""
        status = response.status
        try:
            body = json.loads(await self._race(response.read(), "sent no error body"))
        except (ValueError, aiohttp.ClientError, OSError, _Transient):
            body = None
        reason = _error_message(body) or f"HTTP {status} {response.reason or ''}".strip()
        reason = self.provider.scrub(reason[:500])
        if status in (401, 403):
            raise ProviderAuthError(reason)
        if status in _RETRYABLE_STATUS or status >= 500:
            raise _Transient(f"HTTP {status}: {reason}", _retry_after(response))
        raise AgentError(f"provider {self.provider.name!r} returned HTTP {status}: {reason}")

    async def _consume(self, response: aiohttp.ClientResponse) -> None:
        """Read SSE lines to ``[DONE]``; already-buffered bytes are taken without a task."""
        content, buffer = response.content, b""
        while not self.done:
            self._check()
            data = content.read_nowait()
            if not data and not content.at_eof():
                data = await self._race(content.readany(), "no data")
            if not data:
                break  # EOF
            *lines, buffer = (buffer + data).split(b"\n")
            for line in lines:
                await self._line(line.strip())
                if self.done:
                    return
        if not self.done and not self.finish_reason:
            raise _Transient("provider stream ended before the reply was complete")

    async def _line(self, line: bytes) -> None:
        """Apply one SSE line: only ``data:`` lines matter; ``[DONE]`` ends the stream."""
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            chunk = None
        if not isinstance(chunk, dict):
            return  # ignored, as SSE clients ignore what they do not understand
        if chunk.get("error"):
            raise _Transient(f"stream error: {_error_message(chunk)[:500]}")
        if self.call is not None:
            self.call.first_chunk()
        self.reported_model = self.reported_model or str(chunk.get("model") or "")
        if isinstance(usage := chunk.get("usage"), dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            self.usage = Usage(int(prompt or 0), int(completion or 0))
        choices = chunk.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        delta = choice.get("delta") or {}
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            self._check()
            self.streamed = True
            self.reasoning.append(reasoning)
            await self.sink.reasoning(reasoning)
        if isinstance(text := delta.get("content"), str) and text:
            self._check()
            self.streamed = True
            self.text.append(text)
            await self.sink.delta(text)
        for call in delta.get("tool_calls") or []:
            entry = self.tools.setdefault(
                int(call.get("index") or 0), {"id": "", "name": "", "arguments": ""}
            )
            function = call.get("function") or {}
            entry["id"] = entry["id"] or str(call.get("id") or "")
            entry["name"] = entry["name"] or str(function.get("name") or "")
            entry["arguments"] += str(function.get("arguments") or "")
        self.finish_reason = str(choice.get("finish_reason") or self.finish_reason)

    def _check(self) -> None:
        if self.cancel.cancelled:
            raise TurnCancelled(self.cancel.reason)

    async def finish(self) -> AgentResult:
        """Report unexecuted tool calls, then build the result in the client-safe shape."""
        messages: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        for index, entry in sorted(self.tools.items()):
            name, call_id, raw = entry["name"], entry["id"] or f"call_{index}", entry["arguments"]
            try:
                args: Any = json.loads(raw) if raw else {}
            except ValueError:
                args = raw
            self._check()
            await self.sink.tool_started(name, call_id, preview=raw[:200], args=args)
            await self.sink.tool_completed(name, call_id, error=True, result=TOOLS_UNAVAILABLE)
            function = {"name": name, "arguments": raw}
            calls.append({"id": call_id, "type": "function", "function": function})
            tool = {"role": "tool", "tool_call_id": call_id, "tool_name": name}
            messages.append({**tool, "content": TOOLS_UNAVAILABLE})
        if calls:
            messages.insert(0, {"role": "assistant", "content": "", "tool_calls": calls})
        output = "".join(self.text)
        final: dict[str, Any] = {"role": "assistant", "content": output}
        if self.reasoning:
            final["reasoning"] = "".join(self.reasoning)
        messages.append(final)
        now = time.time()
        for message in messages:
            message["timestamp"] = now
        runtime = {"provider": self.provider.name, "model": self.reported_model or self.model}
        return AgentResult(
            output=output,
            usage=self.usage,
            messages=messages,
            runtime=runtime,
            finish_reason="length" if self.finish_reason == "length" else "stop",
        )


def _discard(task: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned task's outcome so nothing leaks or logs 'never retrieved'."""
    if not task.cancelled() and task.exception() is None:
        if isinstance(task.result(), aiohttp.ClientResponse):
            task.result().close()


def _error_message(body: Any) -> str:
    """The message of an OpenAI-style ``{"error": {"message": ...}}`` body, if there is one."""
    error = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    return error if isinstance(error, str) else ""


def _retry_after(response: aiohttp.ClientResponse) -> float | None:
    try:
        return max(0.0, float(response.headers.get("Retry-After", "")))
    except ValueError:
        return None  # absent, or an HTTP date: our own backoff applies
