"""One claimed attempt at a run: its fencing token, and every write it may make.

``RunRepository.claim`` returns an ``Attempt``. Its number (the run's ``attempt`` field, which
each claim increments) is the fencing token: every write below is one script that checks it,
and that the run is still active, so a worker whose lease lapsed and whose run moved on — it
froze, was partitioned or was just slow — can neither append events nor end the run.

How a claimed run ends is decided here too: completed, failed (with a ``FailReason``),
cancelled, or handed back to the queue (worker shutdown). These terminal writes never raise:
one that cannot reach Redis leaves the lease to lapse and the reaper settles the run, and one
that is fenced off means the reaper or another attempt already did; both are logged.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from hermes_queue.config import RunSettings
from hermes_queue.events import EventType
from hermes_queue.keys import Keys
from hermes_queue.redisio.pipeline import PipelinedConnection, SlotPipelines
from hermes_queue.redisio.replication import acknowledged
from hermes_queue.runs.approvals import Approvals
from hermes_queue.runs.model import FailReason, RunRecord, RunStatus
from hermes_queue.runs.scripts import Outcomes, ScriptKeys, decode, load_script
from hermes_queue.runs.steers import PendingSteer, decode_steers
from hermes_queue.streams.codec import encode_data

log = logging.getLogger(__name__)


class FinishTrace(Protocol):
    """Where a traced process records the terminal transition (``tracing.spans.Tracing``)."""

    def finish_span(self, status: str, data: Mapping[str, Any]) -> AbstractContextManager[Any]: ...


class FencedScripts:
    """The scripts every attempt of one repository writes through, and what they share."""

    def __init__(
        self,
        redis: aioredis.Redis,
        settings: RunSettings,
        keys: Keys,
        approvals: Approvals,
        on_finished: Outcomes,
        record_ttl: int,
        finish_trace: FinishTrace | None = None,
    ) -> None:
        self.settings = settings
        self.finish_trace = finish_trace
        self.keys = keys
        # The keys each script takes, as its header declares them.
        self.keys_of = ScriptKeys(keys)
        # How long a live run's keys are kept (the record's TTL): its steps list's too.
        self.record_ttl = record_ttl
        self.approvals = approvals
        self.on_finished = on_finished
        self.append = redis.register_script(load_script("append", sharded=keys.cluster))
        # Both read a run's pending steers (lua/steer_prelude.lua): a step takes off those it
        # applied, a completed run reports those never applied.
        self.append_step = redis.register_script(
            load_script("append_step", "steer_prelude", sharded=keys.cluster)
        )
        self.finish = redis.register_script(
            load_script("finish", "steer_prelude", sharded=keys.cluster)
        )
        # The terminal transition waits for redis_min_replicas replicas (redisio/replication.py); a
        # too-short count is logged: nothing to retry, the lease re-runs a lost one.
        self.finish_acked = acknowledged(
            {"finish": self.finish}, settings.min_replicas, lenient=("finish",)
        )["finish"]
        self.release = redis.register_script(load_script("release", sharded=keys.cluster))
        # Appends are the hot path of a turn: pipelined on one connection of their own
        # (connected on first use, so API processes never open it).
        # On a cluster one such connection per shard, to the node serving it.
        self.appends: PipelinedConnection | SlotPipelines = (
            SlotPipelines(redis, "hermes-queue:appends")
            if keys.cluster
            else PipelinedConnection(redis, "hermes-queue:appends")
        )

    async def aclose(self) -> None:
        await self.appends.aclose()


@dataclass(frozen=True)
class StepWritten:
    """A recorded step: the stream ids of the events written with it, and the run's steers
    still pending after it (what the worker hands its agent at the next boundary)."""

    event_ids: list[str]
    pending_steers: tuple[PendingSteer, ...]


@dataclass(frozen=True)
class Attempt:
    scripts: FencedScripts = field(repr=False)
    # The run as the claim left it (status running, this attempt's number).
    record: RunRecord

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def number(self) -> int:
        """The fencing token."""
        return self.record.attempt

    @property
    def settings(self) -> RunSettings:
        """The run settings its writes use; the sink reads its own there too (delta
        coalescing, the approval timeout and poll)."""
        return self.scripts.settings

    # -- events ------------------------------------------------------------------------------
    async def append(
        self, events: list[tuple[str, dict[str, Any]]], batch_token: str | None = None
    ) -> list[str] | None:
        """The events' stream ids; None when this attempt no longer owns the run.

        Retrying with the same ``batch_token`` after a lost reply never appends twice.
        """
        result = await self._batch(
            self.scripts.append,
            self.scripts.keys_of.of_run("append", self.run_id),
            batch_token or uuid.uuid4().hex,
            events,
        )
        return None if result is None else [decode(entry_id) for entry_id in result]

    async def append_step(
        self,
        events: list[tuple[str, dict[str, Any]]],
        step: dict[str, Any],
        batch_token: str,
        applied_steers: tuple[str, ...] = (),
    ) -> StepWritten | None:
        """``events``, then ``step`` recorded after them (``keys.steps``), in one fenced call:
        what a later attempt resumes from; the steers the step applied (their ids) leave the
        run's pending steers in the same call. None when this attempt no longer owns the run.
        A retry with the same ``batch_token`` records nothing twice."""
        result = await self._batch(
            self.scripts.append_step,
            self.scripts.keys_of.of_run("append_step", self.run_id),
            batch_token,
            events,
            self.scripts.record_ttl,
            encode_data(step),
            " ".join(applied_steers),
        )
        if result is None:
            return None
        ids, pending = result
        return StepWritten([decode(entry_id) for entry_id in ids], decode_steers(decode(pending)))

    async def _batch(
        self,
        script: AsyncScript,
        keys: list[str],
        batch_token: str,
        events: list[tuple[str, dict[str, Any]]],
        *before_events: Any,
    ) -> Any:
        """One fenced batch script call (``append_batch`` in the prelude): its arguments, the
        script's own ones (``before_events``), then the events; the script's reply (None when
        fenced off)."""
        settings = self.settings
        args: list[Any] = [
            self.number,
            settings.stream_maxlen,
            settings.retention_seconds,
            repr(time.time()),
            batch_token,
            *before_events,
        ]
        for event_type, data in events:
            args += [event_type, encode_data(data)]
        return await self.scripts.appends.evalsha(script, keys, args)

    # -- how the run ends ------------------------------------------------------------------
    async def complete(
        self,
        *,
        output: str,
        usage: dict[str, Any],
        messages: list[dict[str, Any]],
        runtime: dict[str, Any] | None,
        shown: str | None = None,
        streamed: bool = True,
        truncated: bool = False,
        unwritten: Sequence[tuple[str, dict[str, Any]]] = (),
    ) -> bool:
        """``assistant.completed`` with the reply as shown to a person (``shown``, default the
        output), then ``run.completed`` with the run's output; the record keeps output and
        usage. ``streamed``: the reply's text went out as ``message.delta`` events (else a
        dialect that shows text only from deltas takes it from ``assistant.completed``).
        ``truncated``: the reply stopped at the model's output limit (``finish_reason``
        ``length`` on ``run.completed``). ``unwritten``: the turn's events not in the stream
        yet (``RunEventSink.take_unwritten``), written first in the same script call."""
        reply = _reply(output if shown is None else shown, runtime, streamed)
        data = {"output": output, "usage": usage, "messages": messages, "runtime": runtime}
        fields = {"output": output, "usage": json.dumps(usage)}
        if truncated:
            data["finish_reason"] = reply[1]["finish_reason"] = "length"
        return await self._end(
            RunStatus.COMPLETED, EventType.RUN_COMPLETED, data, fields, [*unwritten, reply]
        )

    async def fail(self, reason: FailReason, error: str, *, as_reply: bool = False) -> bool:
        """``run.failed``; ``as_reply``: after an ``assistant.completed`` carrying the error,
        for a failure that session chat and chat completions answer as a reply (upstream's
        provider-auth text, upstream-api.md §6.4)."""
        details = {"error": error, "reason": reason}
        before = [_reply(error, None, streamed=False)] if as_reply else []
        return await self._end(RunStatus.FAILED, EventType.RUN_FAILED, details, details, before)

    async def cancel(self) -> bool:
        return await self._end(RunStatus.CANCELLED, EventType.RUN_CANCELLED, {})

    async def hand_back(self) -> None:
        """Worker shutdown: give the run back to the queue, or cancel it if a stop is pending."""
        try:
            if await self._release() == "stopping":
                await self.cancel()
        except Exception:
            log.exception("run %s: hand-back failed; the reaper will settle it", self.run_id)

    async def _end(
        self,
        status: RunStatus,
        event_type: EventType,
        data: dict[str, Any],
        fields: dict[str, str] | None = None,
        before: list[tuple[str, dict[str, Any]]] | None = None,
    ) -> bool:
        """The terminal event and status (after ``before``, in the same script); False when
        not written (logged, see above)."""
        try:
            traced = self.scripts.finish_trace
            with traced.finish_span(status, data) if traced is not None else nullcontext():
                written = await self._finish(status, event_type, data, fields or {}, before or [])
        except Exception:
            log.exception("run %s: could not write its terminal event", self.run_id)
            return False
        if not written:
            log.warning("run %s attempt %d: terminal write fenced off", self.run_id, self.number)
        return written

    async def _finish(
        self,
        status: RunStatus,
        event_type: EventType,
        data: dict[str, Any],
        fields: dict[str, str],
        before: list[tuple[str, dict[str, Any]]],
    ) -> bool:
        settings = self.settings
        result = await self.scripts.finish_acked(
            keys=self.scripts.keys_of.of_run("finish", self.run_id),
            args=[
                self.run_id,
                self.number,
                status,
                event_type,
                repr(time.time()),
                encode_data(data),
                settings.retention_seconds,
                settings.stream_maxlen,
                len(before),
                *[item for kind, extra in before for item in (kind, encode_data(extra))],
                *[item for pair in fields.items() for item in pair],
            ],
        )
        if result is None:
            return False
        self.scripts.on_finished(status)
        return True

    async def _release(self) -> str:
        """``released`` (queued again, workers woken), ``stopping`` or ``lost`` (fenced)."""
        keys = self.scripts.keys
        result = await self.scripts.release(
            keys=self.scripts.keys_of.of_run("release", self.run_id),
            args=[self.run_id, self.number, repr(time.time()), keys.wake_channel_of(self.run_id)],
        )
        return decode(result)

    # -- approvals (runs/approvals.py) -----------------------------------------------------
    async def request_approval(self, request_id: str, data: dict[str, Any]) -> str | None:
        """``waiting`` or ``stopping``; None when this attempt no longer owns the run. Retrying
        with the same ``request_id`` after a lost reply never asks twice."""
        return await self.scripts.approvals.request(self.run_id, self.number, request_id, data)

    async def approval_choice(self, request_id: str) -> str | None:
        """The answer recorded for the request, if any."""
        return await self.scripts.approvals.choice(self.run_id, request_id)

    async def settle_approval(self, request_id: str) -> tuple[str, str] | None:
        """Time the request out: ``("timed_out", "deny")``, or ``("answered", choice)`` when an
        answer won the race; None when this attempt no longer owns the run."""
        return await self.scripts.approvals.settle(self.run_id, self.number, request_id)


def _reply(
    content: str, runtime: dict[str, Any] | None, streamed: bool
) -> tuple[str, dict[str, Any]]:
    """The ``assistant.completed`` event of a reply."""
    return EventType.ASSISTANT_COMPLETED, {
        "content": content,
        "runtime": runtime,
        "streamed": streamed,
    }
