"""OpenTelemetry traces, one per turn (docs/deploy.md, "Tracing").

Optional (``pip install 'hermes-queue[otel]'``) and configured only by the standard ``OTEL_*``
environment variables: a process whose environment names an OTLP endpoint
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) builds a tracer
provider at start (``install``, called by the CLI, which hands the :class:`~.spans.Tracing` to
the API's state and the worker's runtime like any other service); any other process never
imports the SDK, and every hook in the code is one None check of the ``Tracing`` it was handed
or of ``current_turn()`` (``context.py``: the attempt a job's code runs for).

The hooks, each a line or two where the thing it traces happens:

- ``api/app.py``: the server middleware (``Tracing.http_middleware``): one span per request,
  honouring an incoming ``traceparent`` / ``tracestate``;
- ``api/turns/starter.py``: ``Tracing.enqueue``: a span around run creation, which stores the
  request span's context in the run's ``TurnRequest.trace``;
- ``workers/turn.py``: ``Tracing.begin_turn`` after the claim: the wait in the queue, the
  claim and the attempt's span, children of the request's span in another process; the
  attempt's ``TurnTrace`` is ``current_turn()`` for everything the job does;
- ``workers/sink.py``: tool spans (``tool_started`` / ``tool_completed``), the approval wait;
- ``runs/attempt.py``: the terminal transition (``finish_span``, through the
  ``FinishTrace`` the run repository was given);
- ``agents/hermes/durable.py``, ``agents/openai_compat.py``: one span per model request;
- ``api/feed.py``: from the run's first event to a reader's first frame.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from hermes_queue.tracing.context import current_turn

if TYPE_CHECKING:
    from hermes_queue.tracing.spans import Tracing

log = logging.getLogger(__name__)

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` asks for traces: an OTLP endpoint is named, and neither
    ``OTEL_SDK_DISABLED=true`` nor ``OTEL_TRACES_EXPORTER=none`` says otherwise."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARS)


def install(environ: Mapping[str, str], role: str) -> Tracing | None:
    """This process's tracing (``role``: ``api``, ``worker``, ``dev``) when ``environ`` asks
    for it, else None. The caller hands it to the services it starts, as it hands them their
    settings. Without the ``otel`` extra a warning says so and the process runs untraced:
    observability never stops the service."""
    if not wanted(environ):
        return None
    try:
        from hermes_queue.tracing.setup import build
    except ImportError as exc:
        log.warning(
            "an OTLP endpoint is configured but OpenTelemetry is not installed (%s); "
            "running without traces: pip install 'hermes-queue[otel]'",
            exc,
        )
        return None
    return build(environ, role)


__all__ = ["ENDPOINT_VARS", "current_turn", "install", "wanted"]
