"""The official ``openai`` Python SDK against a real hermes-queue server (TCP, not a test client).

Drop-in compatibility means an unmodified OpenAI client pointed at our ``/v1`` works: the SDK
parses every frame we send (including upstream's named ``hermes.tool.progress`` frames and our
``reasoning_content`` deltas), surfaces errors through its own exception types, and lists
models. The echo backend answers, run by an in-process worker.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from aiohttp import web
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionChunk

from hermes_queue.api.app import create_app
from hermes_queue.config import Settings
from hermes_queue.redisio.embedded import free_port
from tests.support.inprocess import running_worker


@contextlib.asynccontextmanager
async def tcp_api(settings: Settings) -> AsyncIterator[str]:
    """The API on a real TCP port, as a deployed client reaches it; yields its ``/v1`` URL."""
    runner = web.AppRunner(create_app(settings))
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[AsyncOpenAI]:
    async with tcp_api(settings) as base_url, running_worker(settings):
        # No retries: a failure must show up as the first answer, not be papered over.
        sdk = AsyncOpenAI(
            base_url=base_url, api_key=settings.api.api_key, max_retries=0, timeout=30
        )
        try:
            yield sdk
        finally:
            await sdk.close()


def extra(model: Any) -> dict[str, Any]:
    """Fields the SDK's models do not declare but keep (pydantic ``extra='allow'``)."""
    return dict(model.model_extra or {})


async def test_non_stream_completion(client: AsyncOpenAI, settings: Settings) -> None:
    raw = await client.chat.completions.with_raw_response.create(
        model=settings.routing.model_name, messages=[{"role": "user", "content": "hello sdk"}]
    )
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == settings.routing.model_name
    [choice] = completion.choices
    assert choice.message.role == "assistant"
    assert choice.message.content == "Echo: hello sdk"
    assert choice.finish_reason == "stop"
    usage = completion.usage
    assert usage is not None and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    # Our additions are plain headers, readable through the SDK's raw response.
    assert raw.headers["X-Hermes-Run-Id"].startswith("run_")
    assert raw.headers["X-Hermes-Session-Id"].startswith("api-")


async def test_stream_with_reasoning_tool_progress_and_usage(
    client: AsyncOpenAI, settings: Settings
) -> None:
    stream = await client.chat.completions.create(
        model=settings.routing.model_name,
        messages=[{"role": "user", "content": "hi [think] [tool:x]"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks: list[ChatCompletionChunk] = [chunk async for chunk in stream]

    # Upstream's named hermes.tool.progress frames reach SDK users as chunks without choices
    # (the SDK casts every data frame to a chunk); the usual `if not chunk.choices` guard,
    # needed anyway for OpenAI's own usage-only chunk, skips them.
    progress = [extra(c) for c in chunks if c.choices is None]
    assert [(p["tool"], p["status"]) for p in progress] == [("x", "running"), ("x", "completed")]
    assert progress[0]["toolCallId"] == progress[1]["toolCallId"] == "call_1"

    choice_chunks = [c for c in chunks if c.choices]
    assert {c.id for c in choice_chunks} == {choice_chunks[0].id}
    assert all(c.object == "chat.completion.chunk" for c in choice_chunks)
    deltas = [c.choices[0].delta for c in choice_chunks]
    assert deltas[0].role == "assistant"
    assert "".join(d.content or "" for d in deltas) == "Echo: hi"
    reasoning = [extra(d).get("reasoning_content") for d in deltas]
    assert "Thinking about: hi" in reasoning

    final = choice_chunks[-1]
    assert final.choices[0].finish_reason == "stop"
    assert all(c.choices[0].finish_reason is None for c in choice_chunks[:-1])
    # Usage rides on the final chunk (beside finish_reason; OpenAI sends a usage-only chunk).
    assert chunks[-1] is final
    assert final.usage is not None and final.usage.completion_tokens == 2
    assert final.usage.total_tokens == final.usage.prompt_tokens + final.usage.completion_tokens


async def test_failure_mid_stream_is_an_sdk_error(client: AsyncOpenAI, settings: Settings) -> None:
    """The error chunk (then [DONE]) is what the SDK turns into APIError: never a cut socket."""
    stream = await client.chat.completions.create(
        model=settings.routing.model_name,
        messages=[{"role": "user", "content": "one two three four [fail]"}],
        stream=True,
    )
    text: list[str] = []
    with pytest.raises(openai.APIError) as raised:
        async for chunk in stream:
            if chunk.choices:
                text.append(chunk.choices[0].delta.content or "")
    assert "echo backend failure requested" in raised.value.message
    assert "".join(text).startswith("Echo: ")  # the partial reply came first


async def test_models_list(client: AsyncOpenAI, settings: Settings) -> None:
    models = [model async for model in client.models.list()]
    assert [m.id for m in models] == [settings.routing.model_name]
    assert models[0].object == "model" and models[0].owned_by == "hermes"


async def test_wrong_key_is_an_authentication_error(settings: Settings) -> None:
    async with tcp_api(settings) as base_url:
        sdk = AsyncOpenAI(base_url=base_url, api_key="wrong-key", max_retries=0)
        try:
            with pytest.raises(openai.AuthenticationError) as raised:
                await sdk.models.list()
        finally:
            await sdk.close()
    assert raised.value.code == "gateway_auth_failed"


async def test_responses_create_chain_and_retrieve(client: AsyncOpenAI, settings: Settings) -> None:
    first = await client.responses.create(
        model=settings.routing.model_name, input="hello responses", instructions="be kind"
    )
    assert first.object == "response" and first.status == "completed"
    assert first.id.startswith("resp_")
    assert first.output_text == "Echo: hello responses"
    assert first.usage is not None and first.usage.total_tokens > 0
    second = await client.responses.create(
        model=settings.routing.model_name, input="again", previous_response_id=first.id
    )
    assert second.output_text == "Echo: again (turn 2)"
    assert second.instructions == "be kind"
    stored = await client.responses.retrieve(second.id)
    assert stored.id == second.id and stored.output_text == "Echo: again (turn 2)"
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve("resp_" + "0" * 28)


async def test_responses_stream(client: AsyncOpenAI, settings: Settings) -> None:
    stream = await client.responses.create(
        model=settings.routing.model_name, input="stream me [tool:lookup]", stream=True
    )
    seen = [event async for event in stream]
    assert [e.sequence_number for e in seen] == list(range(len(seen)))
    assert seen[0].type == "response.created" and seen[-1].type == "response.completed"
    text = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
    assert text == "Echo: stream me"
    final = seen[-1].response
    assert final.output_text == "Echo: stream me"
    assert [item.type for item in final.output] == [
        "message",
        "function_call",
        "function_call_output",
    ]


async def test_a_stream_through_keepalives_is_read_to_its_end(settings: Settings) -> None:
    """A quiet stretch (a tool step longer than keepalive_seconds) sends keepalives; the SDK's
    decoder keeps the last id across events and once read each one as an empty, unparseable
    event (JSONDecodeError): now they reach it as lone comment lines (api/http/sse.py)."""
    quiet = settings.replace(keepalive_seconds=0.2)
    async with tcp_api(quiet) as base_url, running_worker(quiet):
        sdk = AsyncOpenAI(base_url=base_url, api_key=settings.api.api_key, max_retries=0)
        try:
            stream = await sdk.chat.completions.create(
                model=settings.routing.model_name,
                messages=[{"role": "user", "content": "wait [tool:x] [slowtool:1]"}],
                stream=True,
            )
            chunks = [chunk async for chunk in stream]
            response = await sdk.responses.create(
                model=settings.routing.model_name, input="wait [tool:y] [slowtool:1]", stream=True
            )
            kinds = [event.type async for event in response]
        finally:
            await sdk.close()
    finals = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finals[-1] == "stop"
    assert kinds[-1] == "response.completed"
