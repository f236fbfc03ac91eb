"""One OpenTelemetry trace per turn, across OS processes (issue 24): an OTLP/HTTP receiver in
the test, an API process and worker processes exporting to it (only the standard OTEL_*
variables), the hermes backend against the fake LLM, and a tool-calling turn started with a
known ``traceparent``. Every span arrives under that trace id, from both processes, each with
its parent among them (or the caller's span); one span per model call and per tool call. A
worker SIGKILLed after a tool result was recorded: the next worker's attempt is a span of the
same trace, under the same request, with the event saying it resumed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from hermes_queue.client import iter_sse
from hermes_queue.config import Settings
from tests.conftest import require_hermes
from tests.e2e.test_durable_steps_e2e import KEY, has_result, hermes_settings, steps_of
from tests.support.fake_llm import FakeLLM
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.polling import eventually
from tests.support.processes import Cluster

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
HEADERS = {"traceparent": TRACEPARENT, "tracestate": "tester=1"}


@dataclass
class Traced:
    cluster: Cluster
    otlp: OtlpReceiver
    url: str
    session: aiohttp.ClientSession
    counter: Path
    fake: FakeLLM


@pytest.fixture
async def traced(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Traced]:
    require_hermes()
    monkeypatch.setenv("HQ_DURABLE_KEY", KEY)
    async with contextlib.AsyncExitStack() as stack:
        otlp = await stack.enter_async_context(OtlpReceiver())
        fake = await stack.enter_async_context(FakeLLM(expected_key=KEY, token_delay=0.02))
        # The children inherit this environment: tracing is configured by OTEL_* alone.
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        cluster = Cluster(hermes_settings(settings, fake, tmp_path / "hermes"))
        stack.callback(cluster.stop_all)
        url = await cluster.start_api(log_format="json")
        auth = {"Authorization": f"Bearer {settings.api.api_key}"}
        session = await stack.enter_async_context(aiohttp.ClientSession(headers=auth))
        yield Traced(cluster, otlp, url, session, tmp_path / "counter", fake)


def carries_result(call_id: str) -> Callable[[Any], bool]:
    """A model request whose conversation holds tool call ``call_id``'s result."""

    def carries(body: Any) -> bool:
        messages = body.get("messages", []) if isinstance(body, dict) else []
        return any(
            isinstance(m, dict) and m.get("role") == "tool" and m.get("tool_call_id") == call_id
            for m in messages
        )

    return carries


async def start(traced: Traced, text: str) -> str:
    async with traced.session.post(
        f"{traced.url}/v1/runs", json={"input": text}, headers=HEADERS
    ) as created:
        assert created.status == 202, await created.text()
        return str((await created.json())["run_id"])


async def read_to_end(traced: Traced, run_id: str) -> list[dict[str, Any]]:
    async with traced.session.get(
        f"{traced.url}/v1/runs/{run_id}/events", headers=HEADERS
    ) as response:
        return [frame.json() async for frame in iter_sse(response) if frame.data]


def named(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.name == name]


def orphans(spans: list[ReceivedSpan]) -> list[str]:
    """The spans whose parent has not arrived (nor is the caller's)."""
    ids = {span.span_id for span in spans}
    return [s.name for s in spans if s.parent_id not in ids and s.parent_id != CALLER_SPAN]


def complete(run_id: str, model_calls: int, tool_calls: int, attempt: int = 1) -> Any:
    def check(spans: list[ReceivedSpan]) -> bool:
        ours = [s for s in spans if s.attributes.get("hermes_queue.attempt") == attempt]
        return (
            len([s for s in ours if s.name.startswith("chat ")]) >= model_calls
            and len([s for s in ours if s.name.startswith("execute_tool ")]) >= tool_calls
            and bool(named(ours, "agent.turn"))
            and bool(named(spans, "reader.first_frame"))
            and bool(named(spans, "POST /v1/runs"))
        )

    return check


async def test_a_tool_calling_turn_is_one_trace_from_both_processes(traced: Traced) -> None:
    await traced.cluster.start_worker(log_format="json")
    turn = f"two tools [calls:2] [terminal:echo x >> {traced.counter}]"
    run_id = await start(traced, turn)
    events = await read_to_end(traced, run_id)
    assert events[-1]["event"] == "run.completed"
    async with traced.session.get(f"{traced.url}/v1/runs/{run_id}") as answer:
        assert (await answer.json())["trace_id"] == TRACE_ID
    await eventually(
        lambda: traced.otlp.of_trace(TRACE_ID), complete(run_id, 3, 2), what="the turn's spans"
    )
    # A parent ends after its children (the SSE request after its first frame), so it may come
    # in a later export batch than they do: wait for every parent; a true orphan times out.
    spans = await eventually(
        lambda: traced.otlp.of_trace(TRACE_ID),
        lambda found: not orphans(found),
        what=lambda: f"the parents of {orphans(traced.otlp.of_trace(TRACE_ID))}",
    )
    elsewhere = [
        s.name
        for s in traced.otlp.spans
        if s.attributes.get("hermes_queue.run.id") == run_id and s.trace_id != TRACE_ID
    ]
    assert not elsewhere, elsewhere
    services = {span.service for span in spans}
    assert services == {"hermes-queue-api", "hermes-queue-worker"}
    post = named(spans, "POST /v1/runs")[0]
    assert post.parent_id == CALLER_SPAN and post.service == "hermes-queue-api"
    turn_span = named(spans, "agent.turn")[0]
    assert turn_span.service == "hermes-queue-worker" and turn_span.parent_id == post.span_id
    assert turn_span.trace_state == "tester=1"  # the caller's tracestate went along
    for name in ("queue.wait", "run.claim"):
        assert named(spans, name)[0].parent_id == post.span_id
    assert turn_span.attributes["hermes_queue.outcome"] == "completed"
    assert turn_span.attributes["hermes_queue.run.id"] == run_id
    assert turn_span.attributes["gen_ai.usage.output_tokens"] > 0
    models = [s for s in spans if s.name.startswith("chat ")]
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    assert len(models) == 3 and len(tools) == 2  # N + 1 model calls, N tool calls
    for span in models + tools + named(spans, "run.finish"):
        assert span.parent_id == turn_span.span_id, span.name
    for model in models:
        assert model.attributes["gen_ai.request.model"] == "fake-model"
        assert model.attributes["gen_ai.system"] == "fake"
        assert model.attributes["gen_ai.usage.input_tokens"] >= 0
        assert model.attributes["gen_ai.response.time_to_first_chunk"] > 0
    assert {t.attributes["gen_ai.tool.name"] for t in tools} == {"terminal"}
    reader = named(spans, "reader.first_frame")[0]
    assert reader.service == "hermes-queue-api"
    for span in spans:  # the message text is in no attribute
        assert "two tools" not in repr(span.attributes)
    # The worker's log lines of the turn name the trace (JSON logs).
    worker = traced.cluster.procs[-1]
    assert f'"trace_id": "{TRACE_ID}"' in worker.log()


async def test_the_attempt_after_a_sigkill_is_in_the_same_trace(traced: Traced) -> None:
    doomed = await traced.cluster.start_worker()
    # Killed while the model call after tool 2's result is held unanswered: a state the worker
    # cannot leave on its own (killed on "result 2 recorded", it was sometimes past tool 3).
    traced.fake.hold = carries_result("call_fake_2")
    run_id = await start(traced, f"three tools [calls:3] [terminal:echo x >> {traced.counter}]")
    await asyncio.wait_for(traced.fake.held.wait(), 60)
    await eventually(
        lambda: steps_of(traced.cluster, run_id), has_result("call_fake_2"), what="result 2"
    )
    doomed.kill()
    traced.fake.release_held.set()
    await traced.cluster.start_worker()
    events = await read_to_end(traced, run_id)
    assert events[-1]["event"] == "run.completed"
    spans = await eventually(
        lambda: traced.otlp.of_trace(TRACE_ID),
        complete(run_id, 1, 1, attempt=2),
        what="the second attempt's spans",
    )
    post = named(spans, "POST /v1/runs")[0]
    second = [s for s in named(spans, "agent.turn") if s.attributes["hermes_queue.attempt"] == 2]
    assert len(second) == 1 and second[0].parent_id == post.span_id
    assert second[0].attributes["hermes_queue.outcome"] == "completed"
    event, attributes = second[0].events[0]
    assert event == "run.resumed" and attributes["hermes_queue.previous_attempt"] == 1
    assert attributes["hermes_queue.workers_lost"] == 1
    assert "lost" in attributes["hermes_queue.reason"]
    assert attributes["hermes_queue.steps"] >= 3
    # Everything of the second attempt hangs off its own turn span or the request.
    ours = [s for s in spans if s.attributes.get("hermes_queue.attempt") == 2]
    assert not orphans([post, *ours])
