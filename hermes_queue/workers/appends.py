"""What the worker's writes to a run share: the batch of events (consecutive deltas merged),
the two ways a write ends a turn (the lease lost to another attempt, Redis gone), and the retry
of an idempotent call.

Publishing events is the product, not an observer: a failed call is retried with backoff (the
callers pass what makes a retry safe: an append's batch token, an approval's request id) and,
if Redis stays away, the turn fails loudly with :class:`EventPublishFailed`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.events import EventType
from hermes_queue.redisio.switchover import refused_for_now

log = logging.getLogger(__name__)

_RETRY_DELAYS = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 2.0, 2.0)

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


async def retrying(what: str, run_id: str, call: Callable[[], Awaitable[T]]) -> T:
    """Run an idempotent Redis call, retrying connection failures and a node's refusals
    for now (``CLUSTERDOWN`` during a cluster failover, ``READONLY`` from a demoted
    primary: ``redisio.switchover.refused_for_now``) with backoff."""
    for delay in _RETRY_DELAYS:
        try:
            return await call()
        except (RedisConnectionError, RedisTimeoutError, OSError, ResponseError) as exc:
            if isinstance(exc, ResponseError) and not refused_for_now(exc):
                raise
            log.warning("%s for %s failed (%s); retrying in %.2fs", what, run_id, exc, delay)
            await asyncio.sleep(delay)
    try:
        return await call()
    except (RedisConnectionError, RedisTimeoutError, OSError, ResponseError) as exc:
        if isinstance(exc, ResponseError) and not refused_for_now(exc):
            raise
        raise EventPublishFailed(str(exc)) from exc
