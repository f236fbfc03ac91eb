"""``TurnTrace``: the spans of one claimed attempt at a run, in the worker.

Created right after the claim (``Tracing.begin_turn``), from the run record: its parent is the
context the run carries (``TurnRequest.trace``: the span of the request that started it, in
another process), else a new trace. It writes, with their real times:

- ``queue.wait`` (first attempt): from the run's ``created_at`` to the claim's start;
- ``run.claim``: the claim script;
- ``agent.turn``: the attempt, from the claim to its end, with the outcome and the tokens of
  its model calls; a later attempt's carries an event saying why it exists (``run.resumed``
  after recorded steps, else ``run.restarted``), mirroring what ``workers/resume.py`` tells
  readers;

and, as the turn goes, its children: one ``chat <model>`` span per live model request
(``model_call``; ``model_calls`` wraps Hermes' own, in the agent's thread), one
``execute_tool <name>`` span per tool call (from the sink's ``tool.started`` to its
``tool.completed``), ``approval.wait`` and ``run.finish``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from hermes_queue.logs import trace_id_var
from hermes_queue.tracing import names
from hermes_queue.tracing.context import turn_var
from hermes_queue.tracing.quiet_spans import quiet_span

if TYPE_CHECKING:
    from hermes_queue.runs.model import RunRecord

T = TypeVar("T")

# Why a later attempt exists, by how many earlier ones lost their worker (reap.lua counts them;
# the others were handed back by a worker that was stopping).
WORKER_LOST = "the previous attempt's worker was lost (its lease lapsed)"
HANDED_BACK = "the previous attempt's worker was stopping and handed the run back"
BOTH = "earlier attempts lost their worker or were handed back"


class TurnTrace:
    def __init__(
        self,
        tracer: trace.Tracer,
        parent: Context | None,
        record: RunRecord,
        attempt: int,
        worker_id: str,
        claim_started_ns: int,
    ) -> None:
        """``parent``: the context the run carries (its request's span), else a new trace."""
        self.tracer = tracer
        parent = parent if parent is not None else Context()
        self.base: dict[str, Any] = {
            names.RUN_ID: record.run_id,
            names.SESSION_ID: record.session_id,
            names.ATTEMPT: attempt,
            names.WORKER_ID: worker_id,
        }
        claimed = time.time_ns()
        if attempt == 1 and record.created_at > 0:
            created = min(int(record.created_at * 1e9), claim_started_ns)
            wait = tracer.start_span(
                names.QUEUE_WAIT, context=parent, start_time=created, attributes=self.base
            )
            wait.end(end_time=claim_started_ns)
        claim = tracer.start_span(
            names.CLAIM,
            context=parent,
            kind=SpanKind.CONSUMER,
            start_time=claim_started_ns,
            attributes=self.base,
        )
        claim.end(end_time=claimed)
        self.provider = record.route.provider or ""
        self.model = record.route.model or ""
        attributes = {
            **self.base,
            names.OPERATION: "invoke_agent",
            names.CONVERSATION_ID: record.session_id,
        }
        if self.provider:
            attributes[names.SYSTEM] = attributes[names.PROVIDER] = self.provider
        if self.model:
            attributes[names.REQUEST_MODEL] = self.model
        self.span = tracer.start_span(
            names.TURN, context=parent, start_time=claimed, attributes=attributes
        )
        if attempt > 1:
            self.span.add_event(*_why_again(record, attempt))
        self.context = trace.set_span_in_context(self.span, parent)
        self.trace_id = trace.format_trace_id(self.span.get_span_context().trace_id)
        self._tools: dict[str, trace.Span] = {}
        self._lock = threading.Lock()  # model calls end in the agent's threads
        self._input_tokens = self._output_tokens = self._model_calls = 0
        self._status: str | None = None
        self._reason: str | None = None
        self._token: object | None = None

    # -- lifetime ----------------------------------------------------------------------------
    def enter(self) -> None:
        """Make this attempt the current one of the job's task (and everything it starts)."""
        self._token = otel_context.attach(self.context)
        turn_var.set(self)
        trace_id_var.set(self.trace_id)

    def finishing(self, status: str, reason: str | None) -> None:
        """The attempt is writing its terminal transition (``Tracing.finish_span``)."""
        self._status, self._reason = status, reason

    def end(self, outcome: str) -> None:
        for span in self._tools.values():  # a tool the turn left running (stopped, lost)
            span.set_attribute(names.OUTCOME, "interrupted")
            span.end()
        self._tools.clear()
        span = self.span
        span.set_attribute(names.OUTCOME, outcome)
        if self._status is not None:
            span.set_attribute(names.RUN_STATUS, str(self._status))
        if self._reason:
            span.set_attribute(names.FAIL_REASON, self._reason)
        with self._lock:
            if self._model_calls:
                span.set_attribute(names.INPUT_TOKENS, self._input_tokens)
                span.set_attribute(names.OUTPUT_TOKENS, self._output_tokens)
        if outcome == "failed":
            span.set_status(Status(StatusCode.ERROR, self._reason or "failed"))
        span.end()
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._token = None
        turn_var.set(None)
        trace_id_var.set("")

    # -- tool calls (workers/sink.py) ----------------------------------------------------------
    def tool_started(self, name: str, call_id: str) -> None:
        earlier = self._tools.pop(call_id, None)
        if earlier is not None:
            earlier.end()
        self._tools[call_id] = self._tool_span(name, call_id)

    def tool_completed(self, name: str, call_id: str, error: bool) -> None:
        span = self._tools.pop(call_id, None)
        if span is None:  # told without a start: a call lost with an earlier attempt's worker
            span = self._tool_span(name, call_id)
            span.set_attribute(names.TOOL_LOST, True)
        if error:
            span.set_attribute(names.ERROR_TYPE, "tool_error")
            span.set_status(Status(StatusCode.ERROR))
        span.end()

    def _tool_span(self, name: str, call_id: str) -> trace.Span:
        return self.tracer.start_span(
            f"{names.TOOL_CALL} {name}",
            context=self.context,
            attributes={
                **self.base,
                names.OPERATION: "execute_tool",
                names.TOOL_NAME: name,
                names.TOOL_CALL_ID: call_id,
            },
        )

    # -- approvals (workers/sink.py) -----------------------------------------------------------
    async def approval_wait(self, waiting: Awaitable[str]) -> str:
        with quiet_span(self.tracer, names.APPROVAL, attributes=self.base) as span:
            choice = await waiting
            span.set_attribute(names.APPROVAL_CHOICE, choice)
            return choice

    # -- model calls (any thread) ------------------------------------------------------------
    def model_call(self, model: str = "") -> ModelCall:
        """A span for one model request, a child of the attempt's (``ModelCall``)."""
        model = model or self.model
        attributes = {**self.base, names.OPERATION: "chat", names.REQUEST_MODEL: model}
        if self.provider:
            attributes[names.SYSTEM] = attributes[names.PROVIDER] = self.provider
        span = self.tracer.start_span(
            f"{names.MODEL_CALL} {model}",
            context=self.context,
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        return ModelCall(self, span)

    def model_calls(self, call: Callable[..., T], *, streaming: bool) -> Callable[..., T]:
        """``call`` (Hermes' model request: ``call(api_kwargs, **kwargs)``, returning its
        answer) with a span each time; a streaming call's ``on_first_delta`` also notes the
        time to the first chunk (agents/hermes/durable.py)."""

        def traced(api_kwargs: dict[str, Any], **kwargs: Any) -> T:
            model_call = self.model_call(str(api_kwargs.get("model") or ""))
            if streaming:
                told = kwargs.get("on_first_delta")

                def on_first_delta() -> None:
                    model_call.first_chunk()
                    if told is not None:
                        told()

                kwargs["on_first_delta"] = on_first_delta
            try:
                response = call(api_kwargs, **kwargs)
            except BaseException as exc:  # Hermes' interrupts are BaseExceptions
                model_call.failed(type(exc).__name__)
                raise
            usage = _field(response, "usage")
            choices = _field(response, "choices")
            model_call.answered(
                _int(_field(usage, "prompt_tokens")) if usage is not None else None,
                _int(_field(usage, "completion_tokens")) if usage is not None else None,
                model=_field(response, "model"),
                finish_reasons=[
                    str(reason)
                    for choice in (choices if isinstance(choices, list) else [])
                    if (reason := _field(choice, "finish_reason"))
                ],
            )
            return response

        return traced

    def _counted(self, input_tokens: int, output_tokens: int) -> None:
        with self._lock:
            self._model_calls += 1
            self._input_tokens += input_tokens
            self._output_tokens += output_tokens


class ModelCall:
    """One model request's span: ``first_chunk()`` when its stream's first chunk arrives,
    then ``answered(...)`` or ``failed(...)``, which end it (once)."""

    def __init__(self, turn: TurnTrace, span: trace.Span) -> None:
        self._turn = turn
        self._span = span
        self._started = time.monotonic()
        self._first = False
        self._ended = False

    def first_chunk(self) -> None:
        if not self._first:
            self._first = True
            elapsed = time.monotonic() - self._started
            self._span.set_attribute(names.TIME_TO_FIRST_CHUNK, elapsed)

    def answered(
        self,
        input_tokens: int | None,
        output_tokens: int | None,
        *,
        model: Any = None,
        finish_reasons: list[str] | None = None,
    ) -> None:
        if self._ended:
            return
        self._ended = True
        span = self._span
        if input_tokens is not None or output_tokens is not None:
            span.set_attribute(names.INPUT_TOKENS, input_tokens or 0)
            span.set_attribute(names.OUTPUT_TOKENS, output_tokens or 0)
        if isinstance(model, str) and model:
            span.set_attribute(names.RESPONSE_MODEL, model)
        if finish_reasons:
            span.set_attribute(names.FINISH_REASONS, finish_reasons)
        self._turn._counted(input_tokens or 0, output_tokens or 0)
        span.end()

    def failed(self, error_type: str) -> None:
        if self._ended:
            return
        self._ended = True
        self._span.set_attribute(names.ERROR_TYPE, error_type)
        self._span.set_status(Status(StatusCode.ERROR))
        self._span.end()


def _why_again(record: RunRecord, attempt: int) -> tuple[str, dict[str, Any]]:
    """The event of a later attempt: what its readers are told (workers/resume.py), and why."""
    earlier = attempt - 1
    reason = WORKER_LOST if record.lost >= earlier else HANDED_BACK if not record.lost else BOTH
    attributes: dict[str, Any] = {
        names.PREVIOUS_ATTEMPT: earlier,
        names.WORKERS_LOST: record.lost,
        names.REASON: reason,
    }
    if record.seq > 0 and record.steps:
        attributes[names.STEPS] = record.steps
        attributes[names.VALID_THROUGH] = record.step_event
        return "run.resumed", attributes
    return "run.restarted", attributes


def _field(value: Any, name: str) -> Any:
    if value is None:
        return None
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
