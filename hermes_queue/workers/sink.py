"""The worker's EventSink: every backend callback becomes one fenced append to the run stream.

Publishing events is the product, not an observer: a failed XADD is retried with backoff and,
if Redis stays away, the turn fails loudly instead of silently dropping output. A refused
(fenced) append means another attempt owns the run, so the turn is abandoned at once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.events import EventType, message_id_for
from hermes_queue.runs.repository import RunRepository

log = logging.getLogger(__name__)

_RETRY_DELAYS = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 2.0, 2.0)


class LeaseLost(Exception):
    """This attempt no longer owns the run; nothing more may be written for it."""


class EventPublishFailed(Exception):
    """Redis stayed unreachable while appending an event."""


class RunEventSink:
    def __init__(self, repository: RunRepository, run_id: str, attempt: int) -> None:
        self.repository = repository
        self.run_id = run_id
        self.attempt = attempt
        self.message_id = message_id_for(run_id)
        self.events_written = 0
        self._message_started = False

    async def emit(self, event_type: EventType, data: dict[str, Any]) -> str:
        for delay in (*_RETRY_DELAYS, None):
            try:
                ids = await self.repository.append(self.run_id, self.attempt, [(event_type, data)])
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                if delay is None:
                    raise EventPublishFailed(str(exc)) from exc
                log.warning("append to %s failed (%s); retrying in %.2fs", self.run_id, exc, delay)
                await asyncio.sleep(delay)
                continue
            if ids is None:
                raise LeaseLost(self.run_id)
            self.events_written += 1
            return ids[0]
        raise AssertionError("unreachable")

    async def _ensure_message(self) -> None:
        if not self._message_started:
            self._message_started = True
            await self.emit(EventType.MESSAGE_STARTED, {"message_id": self.message_id})

    # -- EventSink --------------------------------------------------------------------------
    async def delta(self, text: str) -> None:
        if not text:
            return
        await self._ensure_message()
        await self.emit(EventType.MESSAGE_DELTA, {"delta": text})

    async def reasoning(self, text: str) -> None:
        if not text:
            return
        await self._ensure_message()
        await self.emit(EventType.REASONING, {"text": text})

    async def tool_started(
        self, name: str, call_id: str, preview: str | None = None, args: Any = None
    ) -> None:
        await self._ensure_message()
        await self.emit(
            EventType.TOOL_STARTED,
            {"tool": name, "tool_call_id": call_id, "preview": preview, "args": args},
        )

    async def tool_completed(
        self,
        name: str,
        call_id: str,
        duration: float = 0.0,
        error: bool = False,
        result: str | None = None,
    ) -> None:
        await self._ensure_message()
        await self.emit(
            EventType.TOOL_COMPLETED,
            {
                "tool": name,
                "tool_call_id": call_id,
                "duration": round(duration, 3),
                "error": error,
                "result": result,
            },
        )
