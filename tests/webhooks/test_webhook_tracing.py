"""With tracing on, each delivery attempt is a ``webhook.attempt`` span in its run's trace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hermes_queue.config import Settings
from hermes_queue.tracing.spans import Tracing
from tests.support.inprocess import running_api, running_worker
from tests.support.polling import eventually
from tests.support.webhook_receiver import Receiver

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


@pytest.fixture
def traced(spans: InMemorySpanExporter) -> Iterator[Tracing]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield Tracing(provider)
    provider.shutdown()


async def test_each_attempt_is_a_span_in_the_runs_trace(
    hook_settings: Settings, receiver: Receiver, spans: InMemorySpanExporter, traced: Tracing
) -> None:
    receiver.answers = [(503, {})]
    async with running_api(hook_settings, traced) as api, running_worker(hook_settings, traced):
        created = await api.post(
            "/v1/runs",
            json={"input": "hi", "webhook": receiver.url},
            headers={"traceparent": TRACEPARENT},
        )
        run_id = (await created.json())["run_id"]

        def attempts() -> list[object]:
            return [s for s in spans.get_finished_spans() if s.name == "webhook.attempt"]

        made = await eventually(attempts, lambda found: len(found) == 2, what="two attempts")
    results = []
    for span in made:
        attributes = dict(span.attributes or {})  # type: ignore[attr-defined]
        assert span.context.trace_id == int(TRACE_ID, 16)  # type: ignore[attr-defined]
        assert attributes["hermes_queue.run.id"] == run_id
        assert attributes["hermes_queue.webhook.id"] == receiver.received[0].webhook_id
        assert attributes["hermes_queue.webhook.event"] == "run.completed"
        results.append(
            (
                attributes["hermes_queue.attempt"],
                attributes["hermes_queue.webhook.result"],
                attributes["http.response.status_code"],
            )
        )
    assert sorted(results) == [(1, "5xx", 503), (2, "2xx", 200)]
