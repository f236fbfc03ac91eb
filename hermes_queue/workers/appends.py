"""What the worker's writes to a run share: the batch of events (consecutive deltas merged),
the two ways a write ends a turn (the lease lost to another attempt, Redis gone), and the retry
of an idempotent call.

Publishing events is the product, not an observer: a failed call is retried with backoff (the
callers pass what makes a retry safe: an append's batch token, an approval's request id) for as
long as Redis may take to come back from a restart or a failover (``OUTAGE_WAIT_SECONDS``:
Sentinel notices a dead primary after ``down-after-milliseconds``, 30 s by default, then
elects); meanwhile the run keeps its lease (lease time counts only while Redis is heard from,
``runs/lua/prelude.lua``) and the agent waits at its next step. Only if Redis stays away longer
does the turn fail loudly with :class:`EventPublishFailed`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.events import EventType
from hermes_queue.redisio.health import OUTAGE_WAIT_SECONDS, OutageLog
from hermes_queue.redisio.switchover import refused_for_now

log = logging.getLogger(__name__)

# Pauses between tries: short at first (a switchover is over in a moment), then every 2 s.
_RETRY_DELAYS = (0.05, 0.1, 0.2, 0.5, 1.0)
_RETRY_EVERY = 2.0
# The clock and the pause of the retries (a test runs them on a clock of its own).
_monotonic = time.monotonic
_pause = asyncio.sleep

Event = tuple[str, dict[str, Any]]
T = TypeVar("T")


def coalesce_deltas(events: list[Event]) -> list[Event]:
    """``events`` with each run of consecutive ``message.delta`` events merged into one."""
    out: list[Event] = []
    for event in events:
        if out and event[0] == EventType.MESSAGE_DELTA and out[-1][0] == EventType.MESSAGE_DELTA:
            out[-1] = (event[0], {"delta": out[-1][1]["delta"] + event[1]["delta"]})
        else:
            out.append(event)
    return out


class LeaseLost(Exception):
    """This attempt no longer owns the run; nothing more may be written for it."""


class EventPublishFailed(Exception):
    """Redis stayed unreachable while appending an event."""


async def retrying(
    what: str, run_id: str, call: Callable[[], Awaitable[T]], wait: float = OUTAGE_WAIT_SECONDS
) -> T:
    """Run an idempotent Redis call, retrying connection failures and a node's refusals
    for now (``CLUSTERDOWN`` during a cluster failover, ``READONLY`` from a demoted
    primary: ``redisio.switchover.refused_for_now``) with backoff, for up to ``wait``
    seconds; then :class:`EventPublishFailed`. One line when the failures start, one when the
    call goes through (``OutageLog``), not one per try."""
    outage = OutageLog(log, f"{what} for {run_id}", meanwhile=f"retrying for up to {wait:.0f} s")
    give_up_at = _monotonic() + wait
    tries = 0
    while True:
        try:
            result = await call()
        except (RedisConnectionError, RedisTimeoutError, OSError, ResponseError) as exc:
            if isinstance(exc, ResponseError) and not refused_for_now(exc):
                raise
            outage.failed(exc)
            delay = _RETRY_DELAYS[tries] if tries < len(_RETRY_DELAYS) else _RETRY_EVERY
            if _monotonic() + delay > give_up_at:
                raise EventPublishFailed(str(exc)) from exc
            await _pause(delay)
            tries += 1
        else:
            outage.ok()
            return result
