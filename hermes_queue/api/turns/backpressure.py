"""Backpressure: new turns are refused with 429 ``queue_full`` while the ready queue is full.

Every turn is admitted here after its request was validated and before anything is written:
while the ready queue is over its configured depth or age (``queue_state.admission``), new work
is refused rather than piled onto a backlog that only grows, with a Retry-After from the
measured drain rate.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from hermes_queue.api.errors import ApiError
from hermes_queue.config import Settings
from hermes_queue.metrics import ApiMetrics
from hermes_queue.queue_state import admission


class Backpressure:
    def __init__(self, redis: aioredis.Redis, settings: Settings, metrics: ApiMetrics) -> None:
        self._redis = redis
        self._settings = settings
        self._metrics = metrics

    async def admit(self) -> None:
        """Raise 429 ``queue_full`` (with Retry-After) when the ready queue is over its limits."""
        refusal = await admission(self._redis, self._settings)
        if refusal is None:
            return
        self._metrics.rejected(refusal.reason)
        what = (
            "too many runs are waiting for a worker"
            if refusal.reason == "depth"
            else "runs have been waiting too long for a worker"
        )
        raise ApiError(
            429,
            "queue_full",
            f"The queue is full ({what}); retry after {refusal.retry_after} s",
            headers={"Retry-After": str(refusal.retry_after)},
        )
