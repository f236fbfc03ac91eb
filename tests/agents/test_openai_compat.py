"""The ``openai`` backend against the fake LLM over real sockets: streaming, errors, stop, secrets.

No Redis is needed: the backend never touches it. Each test gets its own fake server and backend,
with short timeouts and backoff so failure paths finish in well under a second.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from hermes_queue.agents import AgentBackend, load_backend
from hermes_queue.agents.base import (
    AgentError,
    AgentRequest,
    CancelToken,
    TurnCancelled,
    Usage,
)
from hermes_queue.agents.openai_compat import (
    TOOLS_UNAVAILABLE,
    OpenAICompatBackend,
    ProviderAuthError,
    ProviderConfig,
)
from hermes_queue.routing import Selection
from tests.agents.test_echo import RecordingSink
from tests.support.fake_llm import FakeLLM

KEY = "sk-test-SECRET-0123456789abcdef"


@pytest.fixture
async def fake() -> AsyncIterator[FakeLLM]:
    async with FakeLLM(expected_key=KEY) as server:
        yield server


def make_backend(fake: FakeLLM, **provider: Any) -> OpenAICompatBackend:
    settings: dict[str, Any] = {"timeout": 2.0, "max_retries": 2, "api_key": KEY, **provider}
    config = ProviderConfig(name="fake", base_url=fake.base_url, **settings)
    return OpenAICompatBackend({"fake": config}, "fake", backoff=0.01)


@pytest.fixture
async def backend(fake: FakeLLM) -> AsyncIterator[OpenAICompatBackend]:
    instance = make_backend(fake)
    try:
        yield instance
    finally:
        await instance.aclose()


def request(message: Any, **fields: Any) -> AgentRequest:
    route = Selection(**fields.pop("route", {"provider": "fake", "model": "gpt-fake"}))
    return AgentRequest(run_id="r1", session_id="s1", message=message, route=route, **fields)


async def run(
    backend: OpenAICompatBackend, message: Any, **fields: Any
) -> tuple[Any, RecordingSink]:
    sink = RecordingSink()
    result = await backend.run_turn(request(message, **fields), sink, CancelToken())
    return result, sink


async def test_deltas_concatenate_to_output_and_usage_maps(
    backend: OpenAICompatBackend, fake: FakeLLM
) -> None:
    result, sink = await run(backend, "hello there world")
    assert result.output == "You said: hello there world" == sink.text
    assert sink.kinds.count("delta") == 5  # streamed word by word, not in one piece
    usage = fake.usages[-1]
    assert result.usage == Usage(usage["prompt_tokens"], usage["completion_tokens"])
    assert result.usage == Usage(3, 5)
    assert result.runtime == {"provider": "fake", "model": "gpt-fake"}
    [final] = result.messages
    assert final["role"] == "assistant" and final["content"] == result.output
    assert isinstance(final["timestamp"], float) and "reasoning" not in final
    body = fake.last_request.body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["model"] == "gpt-fake"


async def test_reasoning_events_precede_text_and_land_in_the_message(
    backend: OpenAICompatBackend,
) -> None:
    result, sink = await run(backend, "[reasoning] why")
    first_delta = sink.kinds.index("delta")
    assert set(sink.kinds[:first_delta]) == {"reasoning"}
    thought = "".join(e[1] for e in sink.events if e[0] == "reasoning")
    assert thought == "Thinking about: why"
    assert result.messages[-1]["reasoning"] == thought
    assert result.output == "You said: why"


async def test_history_instructions_and_content_parts_reach_the_provider(
    backend: OpenAICompatBackend, fake: FakeLLM
) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    history = [
        {"role": "user", "content": "first", "timestamp": 1.0},
        {"role": "assistant", "content": "", "tool_calls": [call], "timestamp": 2.0},
        {"role": "tool", "tool_call_id": "c1", "tool_name": "f", "content": "ok"},
        {"role": "assistant", "content": "answer", "reasoning": "hmm"},
    ]
    parts = [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]
    result, _ = await run(backend, parts, history=history, instructions="Be brief.")
    assert result.output == "You said: look"
    assert fake.last_request.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "ok", "tool_call_id": "c1"},
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": parts},
    ]


@pytest.mark.parametrize(
    ("model_options", "expected"),
    [
        (
            {"reasoning": {"effort": "high"}, "service_tier": "flex"},
            {"reasoning_effort": "high", "service_tier": "flex"},
        ),
        ({"reasoning_effort": "low"}, {"reasoning_effort": "low"}),
        ({"fast": True}, {}),
        (None, {}),
    ],
)
async def test_model_options_are_mapped_and_only_set_ones_sent(
    backend: OpenAICompatBackend,
    fake: FakeLLM,
    model_options: dict[str, Any] | None,
    expected: dict[str, Any],
) -> None:
    route = {"provider": "fake", "model": "gpt-fake", "model_options": model_options or {}}
    await run(backend, "hi", route=route)
    body = fake.last_request.body
    sent = {k: body[k] for k in ("reasoning_effort", "service_tier") if k in body}
    assert sent == expected


async def test_authorization_carries_the_configured_key_and_the_route_picks_provider(
    fake: FakeLLM,
) -> None:
    other = ProviderConfig(name="other", base_url=fake.base_url, api_key=KEY, timeout=2.0)
    wrong = ProviderConfig(name="fake", base_url=fake.base_url, api_key="sk-wrong", timeout=2.0)
    backend = OpenAICompatBackend({"fake": wrong, "other": other}, "fake", backoff=0.01)
    try:
        result, _ = await run(backend, "hi", route={"provider": "other", "model": "m1"})
        assert fake.last_request.authorization == f"Bearer {KEY}"
        assert result.runtime == {"provider": "other", "model": "m1"}
        with pytest.raises(AgentError, match="unknown provider 'nope'"):
            await run(backend, "hi", route={"provider": "nope", "model": "m1"})
    finally:
        await backend.aclose()


async def test_actual_model_is_the_one_the_provider_reports(
    backend: OpenAICompatBackend, fake: FakeLLM
) -> None:
    fake.actual_model = "gpt-substituted"
    result, _ = await run(backend, "hi")
    assert result.runtime == {"provider": "fake", "model": "gpt-substituted"}


async def test_401_is_a_provider_auth_error_without_the_key(fake: FakeLLM) -> None:
    backend = make_backend(fake, api_key="sk-wrong-key-987654321")
    try:
        with pytest.raises(ProviderAuthError) as caught:
            await run(backend, "hi")
    finally:
        await backend.aclose()
    message = str(caught.value)
    assert message == "⚠️ Provider authentication failed: Incorrect API key provided."
    assert isinstance(caught.value, AgentError)
    assert len(fake.chat_requests) == 1  # auth failures are never retried


async def test_403_is_an_auth_error_too(backend: OpenAICompatBackend) -> None:
    with pytest.raises(ProviderAuthError, match="Provider authentication failed"):
        await run(backend, "[error:403]")


async def test_400_fails_with_the_provider_message_and_no_retry(
    backend: OpenAICompatBackend, fake: FakeLLM
) -> None:
    with pytest.raises(AgentError, match="fake provider error 400") as caught:
        await run(backend, "[error:400]")
    assert not isinstance(caught.value, ProviderAuthError)
    assert "HTTP 400" in str(caught.value)
    assert len(fake.chat_requests) == 1


async def test_flaky_503_is_retried_and_succeeds(
    backend: OpenAICompatBackend, fake: FakeLLM
) -> None:
    result, sink = await run(backend, "[flaky:2] again")
    assert result.output == "You said: again" == sink.text
    assert len(fake.chat_requests) == 3 and fake.flaky_failures == 2


async def test_retry_after_is_honoured(fake: FakeLLM) -> None:
    fake.retry_after = 0.3
    backend = make_backend(fake)
    try:
        started = time.monotonic()
        result, _ = await run(backend, "[flaky:1] wait")
        assert time.monotonic() - started >= 0.3
        assert result.output == "You said: wait"
    finally:
        await backend.aclose()


async def test_retries_exhausted_fail_the_turn(backend: OpenAICompatBackend, fake: FakeLLM) -> None:
    with pytest.raises(AgentError, match="HTTP 503") as caught:
        await run(backend, "[flaky:10] never")
    assert "gave up after 3 attempts" in str(caught.value)
    assert len(fake.chat_requests) == 3  # max_retries=2 → three attempts in all


async def test_unreachable_provider_is_retried_then_fails(fake: FakeLLM) -> None:
    config = ProviderConfig(
        name="down", base_url="http://127.0.0.1:9/v1", timeout=1.0, max_retries=1
    )
    backend = OpenAICompatBackend({"down": config}, "down", backoff=0.01)
    try:
        with pytest.raises(AgentError, match="connection failed"):
            await run(backend, "hi", route={"model": "m"})
    finally:
        await backend.aclose()


async def test_stall_fails_within_the_timeout_instead_of_hanging(fake: FakeLLM) -> None:
    backend = make_backend(fake, timeout=0.3)
    try:
        sink = RecordingSink()
        started = time.monotonic()
        with pytest.raises(AgentError, match="provider stream stalled"):
            await backend.run_turn(request("[stall] hello"), sink, CancelToken())
        assert time.monotonic() - started < 1.5
        assert sink.kinds == ["delta"]
        assert len(fake.chat_requests) == 1  # output went out: no retry
    finally:
        await backend.aclose()


async def test_dropped_connection_mid_stream_fails_without_retry(
    backend: OpenAICompatBackend, fake: FakeLLM
) -> None:
    sink = RecordingSink()
    with pytest.raises(AgentError, match="connection lost"):
        await backend.run_turn(request("[midfail] a b c d e"), sink, CancelToken())
    assert sink.text == "You said: "
    assert len(fake.chat_requests) == 1


async def test_stop_mid_stream_cancels_promptly(fake: FakeLLM) -> None:
    fake.token_delay = 5.0  # the upstream goes silent between tokens
    backend = make_backend(fake, timeout=30.0)
    try:
        sink, cancel = RecordingSink(), CancelToken()
        turn = asyncio.create_task(backend.run_turn(request("one two three"), sink, cancel))
        await asyncio.wait_for(sink.first_delta.wait(), 5)
        cancel.cancel("stop requested")
        with pytest.raises(TurnCancelled):
            # Promptly: well before the next token (5 s away) could have ended the wait.
            await asyncio.wait_for(turn, fake.token_delay / 5)
        assert sink.kinds == ["delta"]
    finally:
        await backend.aclose()


async def test_stop_before_any_response_cancels_promptly(fake: FakeLLM) -> None:
    backend = make_backend(fake, timeout=30.0)
    fake.hang = True  # no status line, no headers: the request itself is what must be abandoned
    try:
        cancel = CancelToken()
        turn = asyncio.create_task(backend.run_turn(request("x"), RecordingSink(), cancel))
        await asyncio.wait_for(fake.received.wait(), 5)
        cancel.cancel()
        with pytest.raises(TurnCancelled):
            await asyncio.wait_for(turn, 1.0)  # the request itself would wait 30 s
    finally:
        await backend.aclose()


async def test_streamed_tool_call_is_reported_as_unavailable(
    backend: OpenAICompatBackend,
) -> None:
    result, sink = await run(backend, "[toolcall:web_search] find cats")
    assert result.output == "You said: find cats"
    started = [e for e in sink.events if e[0] == "tool_started"]
    completed = [e for e in sink.events if e[0] == "tool_completed"]
    args = {"query": "find cats"}
    assert started == [("tool_started", "web_search", "call_fake_1", json.dumps(args), args)]
    assert completed == [
        ("tool_completed", "web_search", "call_fake_1", 0.0, True, TOOLS_UNAVAILABLE)
    ]
    call, tool, final = result.messages
    assert call["role"] == "assistant"
    assert call["tool_calls"] == [
        {
            "id": "call_fake_1",
            "type": "function",
            "function": {"name": "web_search", "arguments": json.dumps(args)},
        }
    ]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_fake_1"
    assert tool["content"] == TOOLS_UNAVAILABLE
    assert final == {"role": "assistant", "content": result.output, "timestamp": final["timestamp"]}


async def test_api_key_never_appears_in_repr_or_errors(fake: FakeLLM) -> None:
    config = ProviderConfig(name="fake", base_url=fake.base_url, api_key=KEY)
    assert KEY not in repr(config) and KEY not in str(config) and "***" in repr(config)
    # A provider that echoes the rejected key back must not leak it through the error text.
    fake.expected_key = "sk-the-right-one"
    backend = make_backend(fake)
    try:
        for message in ("hi", f"[error:400] {KEY}", "[flaky:9]"):
            with pytest.raises(AgentError) as caught:
                await run(backend, message)
            assert KEY not in str(caught.value) and KEY not in repr(caught.value)
        fake.expected_key = None
        with pytest.raises(AgentError) as caught:
            await run(backend, f"[error:422] {KEY}")
        assert KEY not in str(caught.value)
    finally:
        await backend.aclose()


async def test_session_is_reused_across_turns_and_closed_by_aclose(
    backend: OpenAICompatBackend, fake: FakeLLM
) -> None:
    await run(backend, "one")
    session = backend._session
    await run(backend, "[reasoning] two")
    assert session is not None and backend._session is session
    first, second = fake.chat_requests
    assert first.client_port == second.client_port  # the keep-alive connection was reused
    await backend.aclose()
    assert session.closed


async def test_registry_builds_the_backend_from_options(fake: FakeLLM) -> None:
    backend = load_backend(
        "openai",
        providers={"fake": {"base_url": fake.base_url, "api_key": KEY}},
        default_provider="fake",
    )
    try:
        assert isinstance(backend, OpenAICompatBackend) and isinstance(backend, AgentBackend)
        result = await backend.run_turn(
            request("hi", route={"model": "m"}), RecordingSink(), CancelToken()
        )
        assert result.output == "You said: hi"
    finally:
        await backend.aclose()


async def test_silent_provider_times_out_and_is_retried(fake: FakeLLM) -> None:
    fake.hang = True  # accepts the connection, never sends a status line
    backend = make_backend(fake, timeout=0.2, max_retries=1)
    try:
        started = time.monotonic()
        with pytest.raises(AgentError, match=r"did not respond within 0\.2 s") as caught:
            await run(backend, "hi")
        assert time.monotonic() - started < 2.0
        assert "gave up after 2 attempts" in str(caught.value)
        assert len(fake.chat_requests) == 2
    finally:
        await backend.aclose()


class _SleepWatchingToken(CancelToken):
    """A cancel token that says when the backend began a sleep on it (its retry backoff)."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeping = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.sleeping.set()
        await super().sleep(seconds)


async def test_stop_during_retry_backoff_is_prompt(fake: FakeLLM) -> None:
    config = ProviderConfig(name="fake", base_url=fake.base_url, api_key=KEY, max_retries=5)
    backend = OpenAICompatBackend({"fake": config}, "fake", backoff=5.0)
    try:
        cancel = _SleepWatchingToken()
        turn = asyncio.create_task(backend.run_turn(request("[flaky:9]"), RecordingSink(), cancel))
        await asyncio.wait_for(cancel.sleeping.wait(), 5)  # backing off before attempt 2
        cancel.cancel()
        with pytest.raises(TurnCancelled):
            await asyncio.wait_for(turn, 1.0)  # the backoff before the next attempt is 5 s
        assert len(fake.chat_requests) == 1
    finally:
        await backend.aclose()


async def test_fake_answers_non_stream_requests(fake: FakeLLM) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "[reasoning][toolcall:f] x"}]}
    headers = {"Authorization": f"Bearer {KEY}"}
    async with aiohttp.ClientSession() as session:
        url = f"{fake.base_url}/chat/completions"
        async with session.post(url, json=body, headers=headers) as response:
            assert response.status == 200
            reply = await response.json()
    assert reply["object"] == "chat.completion" and reply["model"] == "m"
    [choice] = reply["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "You said: x"
    assert choice["message"]["reasoning_content"] == "Thinking about: x"
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "f"
    assert reply["usage"]["prompt_tokens"] == 2  # words of the user text
