"""Tracing in process (hermes_queue/tracing/): the switch, the carrier a run keeps, and the
spans of a turn through an in-process API and worker, exported to memory."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hermes_queue import tracing
from hermes_queue.agents.base import CancelToken
from hermes_queue.client import iter_sse
from hermes_queue.config import Settings
from hermes_queue.logs import JsonFormatter, TextFormatter, trace_id_var
from hermes_queue.routing import Selection
from hermes_queue.runs.model import RunRecord
from hermes_queue.runs.trace_context import carrier_of, trace_id_of
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.tracing.spans import Tracing
from tests.agents.test_echo import RecordingSink
from tests.agents.test_openai_compat import KEY, make_backend
from tests.agents.test_openai_compat import request as agent_request
from tests.support.fake_llm import FakeLLM
from tests.support.inprocess import running_api, running_worker
from tests.support.polling import eventually

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


@pytest.fixture
def traced(spans: InMemorySpanExporter) -> Iterator[Tracing]:
    """A process's tracing, exporting to ``spans``: handed to the API and worker under test."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield Tracing(provider)
    provider.shutdown()


def test_the_carrier_keeps_a_valid_traceparent_and_tracestate_only() -> None:
    assert trace_id_of({"traceparent": TRACEPARENT}) == TRACE_ID
    assert trace_id_of({"traceparent": f"00-{'0' * 32}-{PARENT_ID}-01"}) is None
    assert trace_id_of({"traceparent": f"ff-{TRACE_ID}-{PARENT_ID}-01"}) is None
    assert trace_id_of({"traceparent": "garbage"}) is None and trace_id_of(None) is None
    stored = {"traceparent": TRACEPARENT, "tracestate": "a=b", "baggage": "x", "other": 1}
    assert carrier_of(stored) == {"traceparent": TRACEPARENT, "tracestate": "a=b"}
    assert carrier_of({"tracestate": "a=b"}) is None and carrier_of("x") is None


def test_a_turn_request_carries_its_trace_and_old_records_read_without_one() -> None:
    turn = TurnRequest("hi", trace={"traceparent": TRACEPARENT})
    assert TurnRequest.from_json(json.loads(json.dumps(turn.to_json()))) == turn
    assert "trace" not in TurnRequest("hi").to_json()
    assert TurnRequest.from_json({"v": 1, "message": "hi"}).trace is None
    record = RunRecord("run_x", "s", "queued", request=turn)
    assert record.to_status()["trace_id"] == TRACE_ID
    assert "trace_id" not in RunRecord("run_x", "s", "queued").to_status()


def test_only_an_endpoint_asks_for_traces() -> None:
    assert not tracing.wanted({})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert not tracing.wanted({**on, "OTEL_SDK_DISABLED": "true"})
    assert not tracing.wanted({**on, "OTEL_TRACES_EXPORTER": "none"})


def test_without_an_endpoint_nothing_of_the_sdk_is_loaded() -> None:
    """An untraced process loads neither the SDK nor the API's tracing modules."""
    code = (
        "import os, sys\n"
        "os.environ.pop('OTEL_EXPORTER_OTLP_ENDPOINT', None)\n"
        "from hermes_queue import tracing\n"
        "from hermes_queue.api.app import create_app\n"
        "from hermes_queue.workers.worker import build_worker\n"
        "import hermes_queue.agents.hermes.durable\n"
        "assert tracing.install(os.environ, 'api') is None\n"
        "loaded = [m for m in sys.modules if m.startswith(('opentelemetry.sdk',"
        " 'hermes_queue.tracing.spans', 'hermes_queue.tracing.attempts'))]\n"
        "print(loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_log_lines_name_the_trace_only_when_there_is_one() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    assert "trace" not in TextFormatter().format(record)
    assert "trace_id" not in json.loads(JsonFormatter().format(record))
    token = trace_id_var.set(TRACE_ID)
    try:
        assert json.loads(JsonFormatter().format(record))["trace_id"] == TRACE_ID
        assert f"trace={TRACE_ID}" in TextFormatter().format(record)
    finally:
        trace_id_var.reset(token)


def by_name(spans: list[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    named: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    return named


def assert_one_tree(spans: list[ReadableSpan], parent_id: int) -> None:
    """Every span is in the trace, and its parent is the caller's span or one of them."""
    ids = {span.context.span_id for span in spans}
    for span in spans:
        assert f"{span.context.trace_id:032x}" == TRACE_ID, span.name
        assert span.parent is not None, span.name
        assert span.parent.span_id in ids or span.parent.span_id == parent_id, span.name


async def read_events(api: TestClient, run_id: str, **headers: str) -> list[dict[str, Any]]:
    response = await api.get(f"/v1/runs/{run_id}/events", headers=headers)
    return [f.json() async for f in iter_sse(response) if f.data]


async def test_a_turn_is_one_trace_under_the_callers_traceparent(
    settings: Settings, spans: InMemorySpanExporter, traced: Tracing
) -> None:
    headers = {"traceparent": TRACEPARENT, "tracestate": "vendor=1"}
    async with running_api(settings, traced) as api, running_worker(settings, traced):
        created = await api.post(
            "/v1/runs", json={"input": "hi [tool:search] [approve]"}, headers=headers
        )
        run_id = (await created.json())["run_id"]
        status = await eventually(
            lambda: status_of(api, run_id), lambda s: s["status"] == "waiting_for_approval"
        )
        assert status["trace_id"] == TRACE_ID
        answer = await api.post(
            f"/v1/runs/{run_id}/approval", json={"choice": "once"}, headers=headers
        )
        assert answer.status == 200
        events = await read_events(api, run_id, **headers)
        assert events[-1]["event"] == "run.completed"
        await eventually(lambda: by_name(list(spans.get_finished_spans())), has_turn_spans)
    # The status reads sent no traceparent: each is a trace of its own.
    finished = [s for s in spans.get_finished_spans() if s.name != "GET /v1/runs/{run_id}"]
    assert_one_tree(finished, int(PARENT_ID, 16))
    named = by_name(finished)
    post = named["POST /v1/runs"][0]
    assert post.parent is not None and post.parent.span_id == int(PARENT_ID, 16)
    assert post.attributes is not None and post.attributes["hermes_queue.run.id"] == run_id
    turn = named["agent.turn"][0]
    assert turn.parent is not None and turn.parent.span_id == post.context.span_id
    attributes = dict(turn.attributes or {})
    assert attributes["hermes_queue.outcome"] == "completed"
    assert attributes["hermes_queue.attempt"] == 1
    tool = named["execute_tool search"][0]
    assert tool.parent is not None and tool.parent.span_id == turn.context.span_id
    assert (tool.attributes or {})["gen_ai.tool.name"] == "search"
    approval = named["approval.wait"][0]
    assert (approval.attributes or {})["hermes_queue.approval.choice"] == "once"
    finish = named["run.finish"][0]
    assert finish.parent is not None and finish.parent.span_id == turn.context.span_id
    wait = named["queue.wait"][0]
    assert wait.end_time is not None and wait.start_time is not None
    assert wait.end_time >= wait.start_time
    assert "reader.first_frame" in named
    for span in finished:  # no message text in any attribute
        assert "hi [tool" not in json.dumps(dict(span.attributes or {}), default=str)


def has_turn_spans(named: dict[str, list[ReadableSpan]]) -> bool:
    wanted = ("POST /v1/runs", "enqueue", "agent.turn", "run.finish", "reader.first_frame")
    return all(name in named for name in wanted)


async def status_of(api: TestClient, run_id: str) -> dict[str, Any]:
    response = await api.get(f"/v1/runs/{run_id}")
    return dict(await response.json())


async def test_without_a_traceparent_a_request_starts_a_trace_of_its_own(
    settings: Settings, spans: InMemorySpanExporter, traced: Tracing
) -> None:
    async with running_api(settings, traced) as api:
        created = await api.post("/v1/runs", json={"input": "hi"})
        run_id = (await created.json())["run_id"]
        status = await status_of(api, run_id)
    post = by_name(list(spans.get_finished_spans()))["POST /v1/runs"][0]
    assert post.parent is None
    assert status["trace_id"] == f"{post.context.trace_id:032x}"


async def test_each_request_of_the_openai_backend_is_a_model_call_span(
    spans: InMemorySpanExporter, traced: Tracing
) -> None:
    """A retried request is two spans: the failed one and the answered one (with its usage
    and time to first chunk), both children of the attempt's span."""
    turn_request = TurnRequest("hello", trace={"traceparent": TRACEPARENT})
    route = Selection(provider="fake", model="gpt-fake")
    record = RunRecord("r1", "s1", "running", route=route, request=turn_request)
    async with FakeLLM(expected_key=KEY) as fake:
        backend = make_backend(fake)

        async def attempt() -> Any:  # its own task, as the worker runs each job
            turn = traced.begin_turn(record, 1, "w1", time.time_ns())
            try:
                return await backend.run_turn(
                    agent_request("hello [flaky:1]"), RecordingSink(), CancelToken()
                )
            finally:
                turn.end("completed")

        try:
            result = await asyncio.create_task(attempt())
        finally:
            await backend.aclose()
    named = by_name(list(spans.get_finished_spans()))
    (turn_span,) = named["agent.turn"]
    failed, answered = sorted(named["chat gpt-fake"], key=lambda s: s.start_time or 0)
    for span in (failed, answered):
        assert span.parent is not None and span.parent.span_id == turn_span.context.span_id
    assert (failed.attributes or {})["error.type"] == "_Transient"
    attributes = dict(answered.attributes or {})
    assert attributes["gen_ai.usage.output_tokens"] == result.usage.output_tokens > 0
    assert attributes["gen_ai.response.time_to_first_chunk"] > 0
    assert attributes["gen_ai.system"] == "fake"
    assert (turn_span.attributes or {})["gen_ai.usage.output_tokens"] == result.usage.output_tokens
