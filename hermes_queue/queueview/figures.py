"""What a queue snapshot holds (depth, workers, throughput, the lists, the tenants) and the two
figures derived from it for autoscalers and refused clients: the workers desired and a
Retry-After."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from hermes_queue.queueview.lists import FailedRun, InFlightRun, QueuedRun
from hermes_queue.queueview.tenants import TenantFigures

# Retry-After bounds: at least a second, and never so long that clients give up on a recovery.
RETRY_AFTER_MIN, RETRY_AFTER_MAX = 1, 60


@dataclass(frozen=True)
class Depth:
    """Runs by state. ``blocked`` runs wait behind another run of their session and have no
    job yet; ``deferred`` ones are in the queue with a start time still in the future."""

    ready: int
    deferred: int
    running: int
    blocked: int
    oldest_ready_age_seconds: float


@dataclass(frozen=True)
class WorkerInfo:
    id: str
    slots: int
    busy: int
    seen_seconds_ago: float
    # The port its /metrics is served on (None: off, or no free port in the range).
    metrics_port: int | None = None


@dataclass(frozen=True)
class Throughput:
    """What the run scripts counted over the last ``window_seconds`` (all processes)."""

    window_seconds: float
    claimed: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def claims_per_second(self) -> float:
        """The ready queue's drain rate: each claim takes one run out of it."""
        return self.claimed / self.window_seconds if self.window_seconds > 0 else 0.0


@dataclass(frozen=True)
class QueueSnapshot:
    at: float
    depth: Depth
    workers: list[WorkerInfo]
    throughput: Throughput
    desired_workers: int
    in_flight: list[InFlightRun] = field(default_factory=list)
    limit: int = 0
    offset: int = 0
    # The page of the ready queue at the same limit and offset, next to be taken first.
    queued: list[QueuedRun] = field(default_factory=list)
    # The failures ``throughput.failed`` counts (the last RECENT_FAILURES of them), newest
    # first; None when not asked for.
    recent_failures: list[FailedRun] | None = None
    # Each tenant's share (tenants.py), ``default`` first.
    tenants: list[TenantFigures] = field(default_factory=list)
    # Each tenant's limits as configured (tenancy/limits.py), by tenant; {} when none is set.
    limits: dict[str, dict[str, float | int]] = field(default_factory=dict)

    @property
    def slots(self) -> int:
        return sum(w.slots for w in self.workers)

    @property
    def busy(self) -> int:
        return sum(w.busy for w in self.workers)

    @property
    def free_slots(self) -> int:
        return sum(max(0, w.slots - w.busy) for w in self.workers)

    def to_json(self) -> dict[str, Any]:
        throughput = asdict(self.throughput)
        throughput["claims_per_second"] = round(self.throughput.claims_per_second, 3)
        return {
            "object": "hermes.queue",
            "at": self.at,
            "depth": {
                k: v for k, v in asdict(self.depth).items() if k != "oldest_ready_age_seconds"
            },
            "oldest_ready_age_seconds": self.depth.oldest_ready_age_seconds,
            "workers": {
                "count": len(self.workers),
                "slots": self.slots,
                "busy": self.busy,
                "free_slots": self.free_slots,
                "desired": self.desired_workers,
                "data": [asdict(w) for w in self.workers],
            },
            "throughput": throughput,
            "in_flight": {
                "total": self.depth.running,
                "limit": self.limit,
                "offset": self.offset,
                "data": [asdict(r) for r in self.in_flight],
            },
            "queued": {
                "total": self.depth.ready,
                "limit": self.limit,
                "offset": self.offset,
                "data": [asdict(r) for r in self.queued],
            },
            "tenants": {
                "window_seconds": self.throughput.window_seconds,
                "data": [
                    {**t.to_json(), "limits": self.limits.get(t.tenant)} for t in self.tenants
                ],
            },
            "recent_failures": None
            if self.recent_failures is None
            else {
                "total": self.throughput.failed,
                "window_seconds": self.throughput.window_seconds,
                "data": [asdict(r) for r in self.recent_failures],
            },
        }


@dataclass(frozen=True)
class Refusal:
    """Why backpressure refuses a new run, and when to come back."""

    reason: str  # "depth" or "age"
    retry_after: int
    ready: int


def desired_workers(depth: Depth, slots_per_worker: int) -> int:
    """Workers needed to run everything ready or running at once, for an autoscaler.

    ``ceil((ready + running) / slots_per_worker)``, and at least 1 while anything at all is
    queued (deferred or blocked runs too), so a scale-to-zero deployment still drains them.
    """
    demand = depth.ready + depth.running
    if demand == 0:
        return 1 if depth.deferred or depth.blocked else 0
    return max(1, math.ceil(demand / max(1, slots_per_worker)))


def retry_after_seconds(backlog: int, drain_per_second: float) -> int:
    """Seconds until ``backlog`` runs leave the ready queue at the measured drain rate,
    clamped to 1..60; 60 when nothing drained recently (no worker, or all stuck)."""
    if drain_per_second <= 0:
        return RETRY_AFTER_MAX
    return min(RETRY_AFTER_MAX, max(RETRY_AFTER_MIN, math.ceil(backlog / drain_per_second)))
