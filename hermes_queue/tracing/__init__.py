"""OpenTelemetry traces, one per turn (docs/deploy.md, "Tracing").

Optional (``pip install 'hermes-queue[otel]'``) and configured only by the standard ``OTEL_*``
environment variables: a process whose environment names an OTLP endpoint
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) installs a tracer
provider at start (``install``, called by the CLI); any other process never imports the SDK,
and every hook in the code is one ``active()`` / ``current_turn()`` None check.

The hooks, each a line or two where the thing it traces happens:

- ``api/app.py``: the server middleware (``Tracing.http_middleware``): one span per request,
  honouring an incoming ``traceparent`` / ``tracestate``;
- ``api/turns/starter.py``: ``Tracing.enqueue``: a span around run creation, which stores the
  request span's context in the run's ``TurnRequest.trace``;
- ``workers/turn.py``: ``Tracing.begin_turn`` after the claim: the wait in the queue, the
  claim and the attempt's span, children of the request's span in another process; the
  attempt's ``TurnTrace`` is ``current_turn()`` for everything the job does;
- ``workers/sink.py``: tool spans (``tool_started`` / ``tool_completed``), the approval wait;
- ``runs/attempt.py``: the terminal transition (``finish_span``);
- ``agents/hermes/durable.py``, ``agents/openai_compat.py``: one span per model request;
- ``api/feed.py``: from the run's first event to a reader's first frame.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from hermes_queue.tracing.carrier import carrier_of, trace_id_of

if TYPE_CHECKING:
    from hermes_queue.tracing.attempts import TurnTrace
    from hermes_queue.tracing.spans import Tracing

log = logging.getLogger(__name__)

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")

_active: Tracing | None = None
# The attempt being run by this job (set by ``Tracing.begin_turn`` in the job's task; the
# agent's threads and the sink's tasks inherit it with the context).
turn_var: contextvars.ContextVar[TurnTrace | None] = contextvars.ContextVar(
    "hermes_queue_turn_trace", default=None
)
_NOTHING: AbstractContextManager[None] = contextlib.nullcontext()


def active() -> Tracing | None:
    """This process's tracing, or None when it does not trace (the hooks' one check)."""
    return _active


def current_turn() -> TurnTrace | None:
    """The traced attempt this code runs for, if any."""
    return turn_var.get()


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` asks for traces: an OTLP endpoint is named, and neither
    ``OTEL_SDK_DISABLED=true`` nor ``OTEL_TRACES_EXPORTER=none`` says otherwise."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARS)


def install(environ: Mapping[str, str], role: str) -> Tracing | None:
    """Install tracing for this process (``role``: ``api``, ``worker``, ``dev``) when
    ``environ`` asks for it. Without the ``otel`` extra a warning says so and the process
    runs untraced: observability never stops the service."""
    global _active
    if _active is not None or not wanted(environ):
        return _active
    try:
        from hermes_queue.tracing.setup import build
    except ImportError as exc:
        log.warning(
            "an OTLP endpoint is configured but OpenTelemetry is not installed (%s); "
            "running without traces: pip install 'hermes-queue[otel]'",
            exc,
        )
        return None
    _active = build(environ, role)
    return _active


def use(tracing: Tracing | None) -> Tracing | None:
    """Make ``tracing`` this process's (tests: an in-memory exporter); returns the previous."""
    global _active
    previous, _active = _active, tracing
    return previous


def finish_span(status: str, data: Mapping[str, Any]) -> AbstractContextManager[Any]:
    """The terminal transition of the current attempt (``runs/attempt.py``), or nothing."""
    traced = _active
    if traced is None:
        return _NOTHING
    return traced.finish_span(status, data)


__all__ = [
    "ENDPOINT_VARS",
    "active",
    "carrier_of",
    "current_turn",
    "finish_span",
    "install",
    "trace_id_of",
    "turn_var",
    "use",
    "wanted",
]
