"""The worker's EventSink: backend callbacks become fenced appends to the run stream.

Appends are group-committed: an event waits only while the previous append is in flight, and
everything that piled up meanwhile goes in the next script call. A turn streaming slowly pays
one round trip per event and no added latency; a fast one pays one round trip per batch instead
of per token. One flusher at a time keeps the stream in emit order, and ``flush()`` must be
awaited before the terminal event is written.

Publishing events is the product, not an observer: a failed append is retried with backoff
(with the same batch token, so a lost reply never duplicates events) and, if Redis stays away,
the turn fails loudly. A refused (fenced) append means another attempt owns the run.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.events import EventType, message_id_for
from hermes_queue.runs.repository import RunRepository

log = logging.getLogger(__name__)

_RETRY_DELAYS = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 2.0, 2.0)
# Largest batch per script call, and the backlog at which emit() waits for the flusher.
MAX_BATCH = 64
MAX_BACKLOG = 512

Event = tuple[str, dict[str, Any]]


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
        self._backlog: list[Event] = []
        self._flusher: asyncio.Task[None] | None = None
        self._failure: Exception | None = None

    async def emit(self, event_type: EventType, data: dict[str, Any]) -> None:
        if self._failure is not None:
            raise self._failure
        self._backlog.append((event_type, data))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_backlog())
        elif len(self._backlog) >= MAX_BACKLOG:
            await self.flush()

    async def flush(self) -> None:
        """Wait until every emitted event is in the stream; raise what stopped that."""
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)
        if self._failure is not None:
            raise self._failure

    async def _flush_backlog(self) -> None:
        while self._backlog and self._failure is None:
            batch, self._backlog = self._backlog[:MAX_BATCH], self._backlog[MAX_BATCH:]
            try:
                await self._append(batch)
            except Exception as exc:  # LeaseLost, EventPublishFailed, or a bug: stop the turn
                self._failure = exc
                self._backlog.clear()

    async def _append(self, batch: list[Event]) -> None:
        token = uuid.uuid4().hex
        for delay in (*_RETRY_DELAYS, None):
            try:
                ids = await self.repository.append(self.run_id, self.attempt, batch, token)
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                if delay is None:
                    raise EventPublishFailed(str(exc)) from exc
                log.warning("append to %s failed (%s); retrying in %.2fs", self.run_id, exc, delay)
                await asyncio.sleep(delay)
                continue
            if ids is None:
                raise LeaseLost(self.run_id)
            self.events_written += len(ids)
            return

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
