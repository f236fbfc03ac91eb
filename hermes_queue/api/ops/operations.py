"""Operations endpoints: ``/metrics``, ``/v1/queue`` and ``/v1/queue/stream``.

All three read ``queueview.snapshot`` (cheap at any queue size), so Prometheus, the JSON view
and the dashboard's live stream can never disagree about what the queue holds. (Backpressure,
which reads the same structures, is ``api/turns/backpressure.py``.)
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable
from typing import Annotated, Any

from aiohttp import web
from pydantic import Field
from redis.exceptions import RedisError

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.fields import RequestModel, as_is, checked
from hermes_queue.api.http.sse import open_stream
from hermes_queue.api.state import STATE, ApiState
from hermes_queue.metrics.processes import CONTENT_TYPE
from hermes_queue.queueview.figures import QueueSnapshot
from hermes_queue.queueview.lists import RECENT_FAILURES
from hermes_queue.queueview.snapshot import MAX_PAGE, snapshot
from hermes_queue.queueview.tenants import TenantView

log = logging.getLogger(__name__)

DEFAULT_PAGE = 50


def _snapshot(
    state: ApiState, limit: int = 0, offset: int = 0, failures: int = 0
) -> Awaitable[QueueSnapshot]:
    """The queue snapshot as this deployment counts workers (live within a lease, each with
    ``worker_concurrency`` slots when none is live)."""
    settings = state.settings
    return snapshot(
        state.redis,
        state.keys,
        settings.runs.lease_seconds,
        default_slots=settings.worker.concurrency,
        limit=limit,
        offset=offset,
        failures=failures,
        tenants=TenantView(frozenset(state.key_table.tenants), settings.runs.limits),
    )


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text format; the queue is read from Redis now, for this scrape."""
    state = request.app[STATE]
    registry = state.metrics
    try:
        registry.queue.snapshot = await _snapshot(state)
    except Exception as exc:
        # A scrape must answer (with redis_up 0) precisely when Redis is in trouble.
        log.warning("metrics: queue state unavailable: %r", exc)
        registry.queue.snapshot = None
        registry.failed("queue_state")
    try:
        registry.webhooks.stats = await state.webhooks.stats()
    except Exception as exc:
        log.warning("metrics: webhook deliveries unavailable: %r", exc)
        registry.webhooks.stats = None
        registry.failed("webhook_stats")
    registry.safely(
        "sse_clients", lambda: registry.sse_clients.set(state.hub.stats()["subscribers"])
    )
    return web.Response(body=registry.render(), headers={"Content-Type": CONTENT_TYPE})


MAX_OFFSET = 10**9


# The page of in-flight runs, for the document (:func:`_page` checks it, with its own codes;
# a docstring here would become the schema's description).
class QueuePageQuery(RequestModel):
    limit: Annotated[Any, checked(as_is, Annotated[int, Field(ge=1, le=MAX_PAGE)] | None)] = None
    offset: Annotated[Any, checked(as_is, Annotated[int, Field(ge=0)] | None)] = None


def _page(request: web.Request) -> tuple[int, int]:
    values = []
    for name, default, low, high in (
        ("limit", DEFAULT_PAGE, 1, MAX_PAGE),
        ("offset", 0, 0, MAX_OFFSET),  # bounded: Redis refuses indexes past 64 bits
    ):
        raw = request.query.get(name, str(default))
        try:
            value = int(raw)
        except ValueError:
            value = low - 1
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise ApiError(
                400, f"invalid_{name}", f"'{name}' must be an integer {bound}", param=name
            )
        values.append(value)
    return values[0], values[1]


async def queue(request: web.Request) -> web.Response:
    """``hermes.queue``: depth by state, workers, throughput, a page of in-flight runs and of
    ready ones, and the recent failures."""
    limit, offset = _page(request)
    state = request.app[STATE]
    queued = await _snapshot(state, limit, offset, RECENT_FAILURES)
    return web.json_response(queued.to_json())


async def queue_stream(request: web.Request) -> web.StreamResponse:
    """The ``/v1/queue`` snapshot as SSE ``event: queue`` frames, one per interval.

    A frame goes out every interval anyway, so no keepalive comments are needed; the loop ends
    when a write finds the client gone, or after a frame once the process drains (a snapshot
    stream never ends by itself, so it must not hold the drain: the dashboard's EventSource
    reconnects, through the balancer, to a replica that stays).
    """
    limit, offset = _page(request)
    state = request.app[STATE]
    interval = state.settings.api.queue_stream_interval_seconds
    response = await open_stream(request)
    while True:
        try:
            queued = await _snapshot(state, limit, offset, RECENT_FAILURES)
            data = json.dumps(queued.to_json(), separators=(",", ":"))
            frame = f"event: queue\ndata: {data}\n\n"
        except RedisError as exc:  # keep the stream: the next tick may read again
            log.warning("queue stream: queue state unavailable: %r", exc)
            frame = ": queue state unavailable\n\n"
        try:
            if state.drain.draining:
                await response.write_eof(frame.encode() + b"retry: 1000\n\n")
                return response
            await response.write(frame.encode())
        except ConnectionResetError:  # aiohttp's ClientConnectionResetError included
            return response
        await asyncio.sleep(interval)
