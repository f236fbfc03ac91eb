"""The OpenTelemetry SDK, set up from the standard ``OTEL_*`` variables (imported only when a
process traces).

What reads which variable: the exporter reads ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``,
``…_HEADERS``, ``…_TIMEOUT``, ``…_COMPRESSION``, ``…_CERTIFICATE``; the provider reads
``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG`` (default: parent-based always-on, so a
caller's sampling decision in ``traceparent`` is followed) and the span limits; the batch
processor ``OTEL_BSP_*``; the resource ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``.
Here only the protocol is chosen (``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL``: ``http/protobuf``,
the default, or ``grpc``, which needs ``opentelemetry-exporter-otlp-proto-grpc``) and, when
neither variable names the service, ``service.name`` defaults to ``hermes-queue-<role>``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from hermes_queue.tracing.spans import Tracing

log = logging.getLogger(__name__)

PROTOCOL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


class TracingConfigError(ValueError):
    """The ``OTEL_*`` variables ask for something this installation cannot do."""


def protocol_of(environ: Mapping[str, str]) -> str:
    for name in PROTOCOL_VARS:
        if value := environ.get(name, "").strip():
            return value
    return "http/protobuf"


def exporter_for(environ: Mapping[str, str]) -> Any:
    protocol = protocol_of(environ)
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError:
            raise TracingConfigError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc"
            ) from None
        return GrpcExporter()
    raise TracingConfigError(f"unsupported OTLP protocol {protocol!r} (use http/protobuf or grpc)")


def resource_for(role: str) -> Resource:
    resource = Resource.create({"hermes_queue.role": role})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: f"hermes-queue-{role}"}))
    return resource


def build(environ: Mapping[str, str], role: str) -> Tracing:
    """A tracer provider exporting in batches to the configured endpoint; flushed at exit."""
    provider = TracerProvider(resource=resource_for(role))
    provider.add_span_processor(BatchSpanProcessor(exporter_for(environ)))
    log.info(
        "tracing on: OTLP %s as %s",
        protocol_of(environ),
        provider.resource.attributes.get(SERVICE_NAME),
    )
    return Tracing(provider)
