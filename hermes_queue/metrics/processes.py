"""Each process's metrics: what every process counts (run outcomes it settled, job fires,
its observer failures), the API's (queue collectors, SSE clients, refusals, drain cuts) and a
worker's (latencies, active turns, webhook attempts, its own HTTP endpoint). Each object owns
its ``CollectorRegistry``, so several built in one process never clash over a name."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    start_http_server,
)

from hermes_queue.metrics.labels import (
    DIALECTS,
    DURATION_BUCKETS,
    JOB_TRIGGERS,
    LATENCY_BUCKETS,
    OUTCOMES,
    WEBHOOK_OUTCOMES,
    WEBHOOK_RESULTS,
)
from hermes_queue.metrics.scrape import QueueCollector, WebhookCollector
from hermes_queue.tenancy.keys import DEFAULT_TENANT

log = logging.getLogger(__name__)

# ``*_created`` timestamps double every counter and histogram and no dashboard here uses them.
disable_created_metrics()  # type: ignore[no-untyped-call]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _ProcessMetrics:
    """What every process exports: run outcomes it settled and its own observer failures."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.runs_total = Counter(
            "hermes_queue_runs",
            "Runs that reached a terminal status, by outcome, counted by the process that "
            "ended them (sum over all API and worker processes).",
            ["outcome"],
            registry=self.registry,
        )
        self.observer_errors_total = Counter(
            "hermes_queue_observer_errors",
            "Failures of metric observations (the run or request itself went on).",
            ["observer"],
            registry=self.registry,
        )
        self.job_fires_total = Counter(
            "hermes_queue_job_fires",
            "Runs created for scheduled jobs, by trigger (schedule: a tick; manual: POST "
            "/api/jobs/{id}/run), counted by the process that created them.",
            ["trigger"],
            registry=self.registry,
        )
        self.job_missed_ticks_total = Counter(
            "hermes_queue_job_missed_ticks",
            "Ticks of scheduled jobs that fired no run: skipped while no worker was up (a "
            "catch-up fires once for all of them).",
            registry=self.registry,
        )
        for outcome in OUTCOMES:  # present at 0 from the start, so rate() sees the first one
            self.runs_total.labels(outcome=outcome)
        for trigger in JOB_TRIGGERS:
            self.job_fires_total.labels(trigger=trigger)

    def safely(self, observer: str, action: Callable[[], Any]) -> None:
        """Run one observation; a failure is logged and counted, never raised."""
        try:
            action()
        except Exception:
            log.exception("metric observer %s failed", observer)
            self.failed(observer)

    def failed(self, observer: str) -> None:
        try:
            self.observer_errors_total.labels(observer=observer).inc()
        except Exception:  # nothing more an observer may do
            log.exception("could not count an observer failure")

    def count_outcome(self, outcome: str) -> None:
        """RunRepository's ``on_finished`` hook."""
        self.safely("runs_total", lambda: self.runs_total.labels(outcome=str(outcome)).inc())

    def job_fired(self, trigger: str) -> None:
        """``schedules.firing.FireObserver``: a run this process created for a job."""
        self.safely("job_fires", lambda: self.job_fires_total.labels(trigger=trigger).inc())

    def job_ticks_missed(self, count: int) -> None:
        self.safely("job_missed_ticks", lambda: self.job_missed_ticks_total.inc(count))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class ApiMetrics(_ProcessMetrics):
    """The API process: cluster queue figures, its SSE clients, its backpressure refusals."""

    def __init__(self, tenants: Collection[str] = ()) -> None:
        super().__init__()
        # The configured tenants: the only tenant label values besides default and other.
        self.tenants = frozenset(tenants)
        self.queue = QueueCollector(self.tenants)
        self.registry.register(self.queue)
        self.webhooks = WebhookCollector()
        self.registry.register(self.webhooks)
        self.sse_clients = Gauge(
            "hermes_queue_sse_clients",
            "Event subscriptions open on this API process (SSE clients and waiting chat calls).",
            registry=self.registry,
        )
        self.backpressure_rejections_total = Counter(
            "hermes_queue_backpressure_rejections",
            "Run-creating requests refused with 429 queue_full, by the limit that was hit.",
            ["reason"],
            registry=self.registry,
        )
        for reason in ("depth", "age"):
            self.backpressure_rejections_total.labels(reason=reason)
        self.tenant_rejections_total = Counter(
            "hermes_queue_tenant_rejections",
            "Run-creating requests refused with 429, by tenant (configured ones, default, "
            "other) and reason: depth and age (the queue's limits), tenant_ready and "
            "tenant_rate (the tenant's own).",
            ["tenant", "reason"],
            registry=self.registry,
        )
        self.drain_cuts_total = Counter(
            "hermes_queue_drain_cuts",
            "Responses this API process cut because its stream-drain bound (stream_drain_seconds"
            " after SIGTERM and drain_grace_seconds) passed before their run ended, by dialect: "
            "hermes (a runs or session stream, closed with a frame its client resumes from on "
            "another replica, or a session chat waiting for its reply), openai (a chat "
            "completions or Responses stream ended with an error chunk, or a completion waiting "
            "for its reply; the client cannot resume it).",
            ["dialect"],
            registry=self.registry,
        )
        for dialect in DIALECTS:
            self.drain_cuts_total.labels(dialect=dialect)

    def rejected(self, reason: str, tenant: str = DEFAULT_TENANT) -> None:
        """One 429; ``tenant`` already a label value (:func:`tenant_label`)."""
        if reason in ("depth", "age"):
            self.safely(
                "backpressure",
                lambda: self.backpressure_rejections_total.labels(reason=reason).inc(),
            )
        self.safely(
            "tenant_rejections",
            lambda: self.tenant_rejections_total.labels(tenant=tenant, reason=reason).inc(),
        )

    def drain_cut(self, dialect: str) -> None:
        """``api.drain.Drain``'s hook: one response cut at the stream-drain bound."""
        self.safely("drain_cuts", lambda: self.drain_cuts_total.labels(dialect=dialect).inc())


class WorkerMetrics(_ProcessMetrics):
    """A worker process: latencies of the runs it picked up, and its own HTTP endpoint."""

    def __init__(self) -> None:
        super().__init__()
        self.pickup_latency_seconds = Histogram(
            "hermes_queue_pickup_latency_seconds",
            "From run creation to its first claim by a worker (first attempts only).",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.time_to_first_event_seconds = Histogram(
            "hermes_queue_time_to_first_event_seconds",
            "From run creation to the agent's first event (delta, reasoning or tool), "
            "first attempts only.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.run_duration_seconds = Histogram(
            "hermes_queue_run_duration_seconds",
            "From claim to terminal status of the attempts this worker ended, by outcome.",
            ["outcome"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.active_runs = Gauge(
            "hermes_queue_worker_active_runs",
            "Turns this worker process is running.",
            registry=self.registry,
        )
        self.webhook_attempts_total = Counter(
            "hermes_queue_webhook_attempts",
            "Webhook delivery attempts this worker made, by result: the answer's class (2xx, "
            "3xx, 4xx, 5xx), timeout, error (no answer) or refused (target not allowed).",
            ["result"],
            registry=self.registry,
        )
        self.webhook_deliveries_total = Counter(
            "hermes_queue_webhook_deliveries",
            "Webhook deliveries this worker settled, by outcome: delivered, gone (410: not "
            "retried) or dead (schedule spent or target refused: a dead letter).",
            ["outcome"],
            registry=self.registry,
        )
        for result in WEBHOOK_RESULTS:
            self.webhook_attempts_total.labels(result=result)
        for outcome in WEBHOOK_OUTCOMES:
            self.webhook_deliveries_total.labels(outcome=outcome)
        self._server: Any = None

    def picked_up(self, created_at: float) -> None:
        self.safely(
            "pickup_latency",
            lambda: self.pickup_latency_seconds.observe(max(0.0, time.time() - created_at)),
        )

    def first_event(self, created_at: float) -> None:
        self.safely(
            "time_to_first_event",
            lambda: self.time_to_first_event_seconds.observe(max(0.0, time.time() - created_at)),
        )

    def ended(self, outcome: str, seconds: float) -> None:
        self.safely(
            "run_duration",
            lambda: self.run_duration_seconds.labels(outcome=outcome).observe(max(0.0, seconds)),
        )

    def webhook_attempt(self, kind: str) -> None:
        """``webhooks.sender.DeliveryObserver``: one attempt and its result."""
        self.safely(
            "webhook_attempts", lambda: self.webhook_attempts_total.labels(result=kind).inc()
        )

    def webhook_settled(self, outcome: str) -> None:
        self.safely(
            "webhook_deliveries",
            lambda: self.webhook_deliveries_total.labels(outcome=outcome).inc(),
        )

    def serve(self, host: str, port: int, span: int = 1) -> int | None:
        """Expose ``/metrics`` from a thread on the first free port of ``port`` ..
        ``port + span - 1`` (``port`` 0: off); returns the port, None when not served.

        A thread of its own, like the lease keeper: agent code blocking the event loop must not
        make the worker look dead to Prometheus. Several workers on one host each take the next
        free port (Prometheus scrapes the range; the worker registry says which is whose). No
        free port is logged, not fatal: metrics never stop a worker from running turns.
        """
        if not port:
            return None
        last_error: OSError | None = None
        for candidate in range(port, port + span):
            try:
                self._server, _thread = start_http_server(
                    candidate, addr=host, registry=self.registry
                )
            except OSError as exc:
                last_error = exc
                continue
            log.info("worker metrics on http://%s:%d/metrics", host, candidate)
            return candidate
        log.error(
            "worker metrics not served: no free port on %s in %d-%d (%s)",
            host,
            port,
            port + span - 1,
            last_error,
        )
        return None

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
