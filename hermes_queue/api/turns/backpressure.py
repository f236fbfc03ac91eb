"""Backpressure: new turns are refused with 429 ``queue_full`` while the ready queue is full.

Every turn is admitted here after its request was validated and before anything is written:
while the ready queue is over its configured depth or age (``queue_state.admission``), new work
is refused rather than piled onto a backlog that only grows, with a Retry-After from the
measured drain rate.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from hermes_queue.api.errors import ApiError
from hermes_queue.keys import Keys
from hermes_queue.metrics import ApiMetrics
from hermes_queue.queue_state import admission


class Backpressure:
    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        metrics: ApiMetrics,
        *,
        max_depth: int = 0,
        max_age: float = 0.0,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._metrics = metrics
        # max_ready_depth, max_ready_age_seconds (0: that limit is off).
        self._max_depth = max_depth
        self._max_age = max_age

    async def admit(self) -> None:
        """Raise 429 ``queue_full`` (with Retry-After) when the ready queue is over its limits."""
        refusal = await admission(self._redis, self._keys, self._max_depth, self._max_age)
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
