"""A small OTLP/HTTP trace receiver for the tests: ``POST /v1/traces`` with a protobuf
``ExportTraceServiceRequest`` (what ``opentelemetry-exporter-otlp-proto-http`` sends), decoded
with ``opentelemetry-proto`` into :class:`ReceivedSpan` rows."""

from __future__ import annotations

import gzip
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

from hermes_queue.redisio.embedded import free_port


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    trace_state: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    events: tuple[tuple[str, dict[str, Any]], ...] = ()


def _value(value: common_pb2.AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, kind) if kind else None


def _attributes(pairs: Iterable[common_pb2.KeyValue]) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


class OtlpReceiver:
    """``async with OtlpReceiver() as otlp``: ``otlp.endpoint`` for ``OTEL_EXPORTER_OTLP_
    ENDPOINT``, ``otlp.spans`` what arrived (every export request answered 200)."""

    def __init__(self, port: int | None = None) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.port = port or free_port()
        self._runner: web.AppRunner | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _export(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        export = trace_service_pb2.ExportTraceServiceRequest()
        export.ParseFromString(body)
        self.requests += 1
        for resource_spans in export.resource_spans:
            service = str(_attributes(resource_spans.resource.attributes).get("service.name"))
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        ReceivedSpan(
                            service=service,
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            trace_state=span.trace_state,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes=_attributes(span.attributes),
                            events=tuple(
                                (event.name, _attributes(event.attributes)) for event in span.events
                            ),
                        )
                    )
        answer = trace_service_pb2.ExportTraceServiceResponse()
        return web.Response(body=answer.SerializeToString(), content_type="application/x-protobuf")

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [span for span in self.spans if span.trace_id == trace_id]

    async def __aenter__(self) -> OtlpReceiver:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._export)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
