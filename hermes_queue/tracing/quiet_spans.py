"""Span helpers both sides share: a span that never carries an exception's text, and a span's
trace id as text."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from hermes_queue.tracing import names


@contextlib.contextmanager
def quiet_span(
    tracer: trace.Tracer,
    name: str,
    *,
    context: Any = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[trace.Span]:
    """A current span that, on an exception, records only its type (``error.type``): an
    exception's text may quote a message or a provider's answer, which spans never carry."""
    with tracer.start_as_current_span(
        name,
        context=context,
        kind=kind,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            span.set_attribute(names.ERROR_TYPE, type(exc).__name__)
            span.set_status(Status(StatusCode.ERROR))
            raise


def hex_trace_id(span: trace.Span) -> str:
    return trace.format_trace_id(span.get_span_context().trace_id)
