"""``Tracing``: one process's tracer and the spans of its API side (the request, the enqueue,
a reader's first frame); the worker's attempt spans are ``attempts.TurnTrace``'s."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from aiohttp import web
from aiohttp.typedefs import Middleware
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from hermes_queue.logs import trace_id_var
from hermes_queue.runs.trace_context import TRACEPARENT
from hermes_queue.tracing import names
from hermes_queue.tracing.attempts import TurnTrace
from hermes_queue.tracing.context import turn_var
from hermes_queue.tracing.quiet_spans import hex_trace_id, quiet_span

if TYPE_CHECKING:
    from hermes_queue.runs.model import RunRecord

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Created(Protocol):
    @property
    def run_id(self) -> str: ...

    @property
    def session_id(self) -> str: ...


E = TypeVar("E", bound=Created)


def route_of(request: web.Request) -> str:
    """The route template (``/v1/runs/{run_id}``), never the ids in the path."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else ""


class Tracing:
    def __init__(self, provider: trace.TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("hermes_queue")
        self.propagator = TraceContextTextMapPropagator()

    def shutdown(self) -> None:
        """Flush and stop the provider's exporters (tests; processes flush at exit)."""
        shutdown = getattr(self.provider, "shutdown", None)
        if callable(shutdown):
            shutdown()

    # -- the API side ------------------------------------------------------------------------
    def http_middleware(self) -> Middleware:
        """The server span of every request, child of the caller's ``traceparent`` if it sent
        a valid one (else a new trace); its trace id is in every log line of the request."""
        tracer, extract = self.tracer, self.propagator.extract

        @web.middleware
        async def trace_request(request: web.Request, handler: Handler) -> web.StreamResponse:
            parent = extract(request.headers) if TRACEPARENT in request.headers else None
            route = route_of(request)
            attributes = {names.HTTP_METHOD: request.method, names.URL_PATH: request.path}
            if route:
                attributes[names.HTTP_ROUTE] = route
            name = f"{request.method} {route}" if route else request.method
            with quiet_span(
                tracer, name, context=parent, kind=SpanKind.SERVER, attributes=attributes
            ) as span:
                token = trace_id_var.set(hex_trace_id(span))
                try:
                    response = await handler(request)
                except web.HTTPException as exc:
                    span.set_attribute(names.HTTP_STATUS, exc.status)
                    raise
                finally:
                    trace_id_var.reset(token)
                span.set_attribute(names.HTTP_STATUS, response.status)
                if request_id := response.headers.get("X-Request-Id"):
                    span.set_attribute(names.REQUEST_ID, request_id)
                if response.status >= 500:
                    span.set_status(Status(StatusCode.ERROR))
                return response

        return trace_request

    async def enqueue(self, start: Callable[[dict[str, str]], Awaitable[E]]) -> E:
        """Create a run (``start``, given the trace context it must carry) under an enqueue
        span. The run carries the request's span context (the enqueue span's own when there
        is no request span), so the worker's spans are the request's children."""
        request_span = trace.get_current_span()
        with quiet_span(self.tracer, names.ENQUEUE, kind=SpanKind.PRODUCER) as span:
            parent = request_span if request_span.get_span_context().is_valid else span
            carrier: dict[str, str] = {}
            self.propagator.inject(carrier, context=trace.set_span_in_context(parent))
            created = await start(carrier)
            ids = {names.RUN_ID: created.run_id, names.SESSION_ID: created.session_id}
            span.set_attributes(ids)
            if parent is not span:
                parent.set_attributes(ids)
            return created

    def first_frame(self, run_id: str, first_event_ts: float, seq: int) -> None:
        """From the first event a reader is sent being written to its first frame leaving
        (the reader's request span is the parent)."""
        start = int(first_event_ts * 1e9) if first_event_ts > 0 else time.time_ns()
        span = self.tracer.start_span(
            names.FIRST_FRAME,
            start_time=min(start, time.time_ns()),
            attributes={names.RUN_ID: run_id, names.EVENT_SEQ: seq},
        )
        span.end()

    # -- the worker side ---------------------------------------------------------------------
    def begin_turn(
        self, record: RunRecord, attempt: int, worker_id: str, claim_started_ns: int
    ) -> TurnTrace:
        """The claimed attempt's spans (``attempts.TurnTrace``), entered for this job."""
        parent = self.propagator.extract(record.request.trace) if record.request.trace else None
        turn = TurnTrace(self.tracer, parent, record, attempt, worker_id, claim_started_ns)
        turn.enter()
        return turn

    @contextlib.contextmanager
    def finish_span(self, status: str, data: Mapping[str, Any]) -> Iterator[None]:
        attributes: dict[str, Any] = {names.RUN_STATUS: str(status)}
        if reason := data.get("reason"):
            attributes[names.FAIL_REASON] = str(reason)
        turn = turn_var.get()
        if isinstance(turn, TurnTrace):
            turn.finishing(status, attributes.get(names.FAIL_REASON))
        with quiet_span(self.tracer, names.FINISH, attributes=attributes):
            yield

    # -- webhook deliveries (webhooks/sender.py) ---------------------------------------------
    @contextlib.contextmanager
    def webhook_span(
        self, carrier: Mapping[str, str] | None, attributes: Mapping[str, Any]
    ) -> Iterator[WebhookAttemptSpan]:
        """One delivery attempt, a child of its run's trace when the run carries one (the
        delivery happens after the run's spans ended, so the trace shows it after them)."""
        parent = self.propagator.extract(dict(carrier)) if carrier else None
        named = {
            names.WEBHOOK_DELIVERY_ID: str(attributes.get("delivery_id", "")),
            names.RUN_ID: str(attributes.get("run_id", "")),
            names.WEBHOOK_EVENT: str(attributes.get("event", "")),
            names.WEBHOOK_TARGET: str(attributes.get("target", "")),
            names.ATTEMPT: int(attributes.get("attempt", 0)),
        }
        with quiet_span(
            self.tracer,
            names.WEBHOOK_ATTEMPT,
            context=parent,
            kind=SpanKind.CLIENT,
            attributes=named,
        ) as span:
            yield WebhookAttemptSpan(span)


class WebhookAttemptSpan:
    """What a delivery attempt records of its result on its span."""

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def result(self, kind: str, status: int | None) -> None:
        self.span.set_attribute(names.WEBHOOK_RESULT, kind)
        if status is not None:
            self.span.set_attribute(names.HTTP_STATUS, status)
        if kind != "2xx":
            self.span.set_status(Status(StatusCode.ERROR))
