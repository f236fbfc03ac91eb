"""The API's collectors read at scrape time: queue and webhook figures from Redis (``update``
before each render), absent when that read failed rather than stale."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hermes_queue.metrics.labels import QUEUE_STATES, TENANT_STATES, tenant_label
from hermes_queue.queueview.figures import QueueSnapshot


class QueueCollector(Collector):
    """Queue gauges from the snapshot read at scrape time (``update`` before each render).

    A custom collector rather than Gauges, so a scrape whose Redis read failed shows no queue
    figures at all (and ``hermes_queue_redis_up 0``) instead of the last, stale ones.
    """

    def __init__(self, tenants: Collection[str] = ()) -> None:
        self.snapshot: QueueSnapshot | None = None
        self.tenants = frozenset(tenants)

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        yield GaugeMetricFamily(
            "hermes_queue_redis_up",
            "1 when this scrape could read the queue state from Redis, else 0.",
            value=1 if snap is not None else 0,
        )
        if snap is None:
            return
        depth = GaugeMetricFamily(
            "hermes_queue_queue_depth",
            "Runs by state: ready (waiting for a worker), deferred (start time in the future), "
            "running (leased by a worker), blocked (behind another run of the same session).",
            labels=["state"],
        )
        for state in QUEUE_STATES:
            depth.add_metric([state], getattr(snap.depth, state))
        yield depth
        yield self._by_tenant(snap)
        yield self._tenant_waits(snap)
        for name, text, value in (
            (
                "hermes_queue_queue_oldest_ready_age_seconds",
                "How long the oldest ready run has been waiting (0 when none is ready).",
                snap.depth.oldest_ready_age_seconds,
            ),
            ("hermes_queue_workers", "Live workers (heartbeat within lease_seconds).", None),
            ("hermes_queue_worker_slots", "Turn slots of all live workers.", snap.slots),
            (
                "hermes_queue_worker_free_slots",
                "Idle turn slots of all live workers.",
                snap.free_slots,
            ),
            (
                "hermes_queue_desired_workers",
                "Workers needed to run every ready and running run at once: "
                "ceil((ready + running) / slots per worker), at least 1 while anything is queued.",
                snap.desired_workers,
            ),
        ):
            yield GaugeMetricFamily(name, text, value=len(snap.workers) if value is None else value)

    def _by_tenant(self, snap: QueueSnapshot) -> Metric:
        """Depth per tenant, the tenant label bounded (:func:`tenant_label`). Autoscalers read
        the totals above, never this."""
        family = GaugeMetricFamily(
            "hermes_queue_tenant_queue_depth",
            "Runs by tenant and state: ready (queued; held ones included), running, held "
            "(ready, left queued at the tenant's tenant_max_running). Tenants not configured "
            "are summed as other.",
            labels=["tenant", "state"],
        )
        folded: dict[str, list[int]] = {}
        for figures in snap.tenants:
            row = folded.setdefault(tenant_label(figures.tenant, self.tenants), [0, 0, 0])
            for i, state in enumerate(TENANT_STATES):
                row[i] += getattr(figures, state)
        for tenant, row in sorted(folded.items()):
            for state, count in zip(TENANT_STATES, row, strict=True):
                family.add_metric([tenant, state], count)
        return family

    def _tenant_waits(self, snap: QueueSnapshot) -> Metric:
        """Each tenant's mean wait over the throughput window (tenants with no run taken in
        it have none), the tenant label bounded as in :meth:`_by_tenant`."""
        family = GaugeMetricFamily(
            "hermes_queue_tenant_wait_seconds",
            "Mean time the runs workers took in the throughput window had waited in the queue, "
            "by tenant (configured ones, default, other; absent for a tenant with none taken).",
            labels=["tenant"],
        )
        folded: dict[str, list[int]] = {}
        for figures in snap.tenants:
            row = folded.setdefault(tenant_label(figures.tenant, self.tenants), [0, 0])
            row[0] += figures.waited_ms
            row[1] += figures.claimed
        for tenant, (waited_ms, claimed) in sorted(folded.items()):
            if claimed:
                family.add_metric([tenant], waited_ms / claimed / 1000)
        return family


class WebhookCollector(Collector):
    """Webhook delivery gauges read from Redis at scrape time (``update`` before each render;
    ``webhooks/outbox.py`` ``Outbox.stats``), absent when that read failed."""

    def __init__(self) -> None:
        self.stats: OutboxFigures | None = None

    def collect(self) -> Iterator[Metric]:
        stats = self.stats
        if stats is None:
            return
        for name, text, value in (
            (
                "hermes_queue_webhook_pending",
                "Webhook deliveries neither delivered nor dead (waiting for an attempt or "
                "their next retry).",
                stats.pending,
            ),
            (
                "hermes_queue_webhook_oldest_pending_age_seconds",
                "Age of the oldest pending webhook delivery (0 when none is pending).",
                stats.oldest_pending_age_seconds,
            ),
            (
                "hermes_queue_webhook_dead_letters",
                "Webhook deliveries kept as dead letters (schedule spent, 410 Gone or target "
                "refused), listed by GET /v1/webhooks/deliveries?state=dead.",
                stats.dead_letters,
            ),
        ):
            yield GaugeMetricFamily(name, text, value=value)


class OutboxFigures(Protocol):
    @property
    def pending(self) -> int: ...

    @property
    def oldest_pending_age_seconds(self) -> float: ...

    @property
    def dead_letters(self) -> int: ...
