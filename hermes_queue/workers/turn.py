"""The arq job: claim the run, drive the agent backend, publish every event, settle the run.

arq delivers at least once, so the job starts by claiming the run; a run that is finished,
gone or held by a live attempt makes the job a no-op. Whatever happens after a successful
claim, the run ends with exactly one terminal event written by this attempt, or is handed back
to the queue (shutdown), or is left to the reaper (this attempt lost its lease).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from hermes_queue.agents.base import (
    AgentBackend,
    AgentError,
    AgentRequest,
    AgentResult,
    CancelToken,
    TurnCancelled,
)
from hermes_queue.events import EventType
from hermes_queue.runs.model import RunStatus
from hermes_queue.runs.repository import Claim, RunRepository
from hermes_queue.store.base import SessionStore, StoreError
from hermes_queue.workers.lease_keeper import LEASE_LOST, LeaseKeeper
from hermes_queue.workers.persistence import SessionTurnLog
from hermes_queue.workers.sink import EventPublishFailed, LeaseLost, RunEventSink

log = logging.getLogger(__name__)


@dataclass
class ActiveRun:
    attempt: int
    token: CancelToken
    lease_lost: bool = False


@dataclass
class WorkerRuntime:
    """What every job of one worker process shares (kept in arq's ctx)."""

    worker_id: str
    repository: RunRepository
    backend: AgentBackend
    keeper: LeaseKeeper | None = None
    store: SessionStore | None = None
    active: dict[str, ActiveRun] = field(default_factory=dict)

    def signal(self, run_id: str, verdict: int) -> None:
        """A stop request or a lost lease reached this worker (pub/sub or heartbeat)."""
        run = self.active.get(run_id)
        if run is None:
            return
        if verdict == LEASE_LOST:
            run.lease_lost = True
            run.token.cancel("lease lost")
        else:
            run.token.cancel("Stop requested via API")


def build_request(claim: Claim, history: list[dict[str, Any]] | None = None) -> AgentRequest:
    record = claim.record
    request = record.request
    return AgentRequest(
        run_id=record.run_id,
        session_id=record.session_id,
        message=request.get("message", ""),
        history=list(request.get("history") or []) if history is None else history,
        instructions=request.get("instructions"),
        route=record.route,
        options=dict(request.get("options") or {}),
        attempt=claim.attempt,
    )


async def run_turn(ctx: dict[str, Any], run_id: str) -> str:
    runtime: WorkerRuntime = ctx["hq"]
    claim = await runtime.repository.claim(run_id, runtime.worker_id)
    if claim is None:
        return "skipped"
    active = ActiveRun(attempt=claim.attempt, token=CancelToken())
    runtime.active[run_id] = active
    if runtime.keeper is not None:
        runtime.keeper.track(run_id, claim.attempt)
    try:
        return await _drive(runtime, claim, active)
    finally:
        runtime.active.pop(run_id, None)
        if runtime.keeper is not None:
            runtime.keeper.untrack(run_id)


async def _drive(runtime: WorkerRuntime, claim: Claim, active: ActiveRun) -> str:
    repo, run_id, attempt = runtime.repository, claim.record.run_id, claim.attempt
    sink = RunEventSink(repo, run_id, attempt)
    turn_log = None
    if claim.record.persist and runtime.store is not None:
        turn_log = SessionTurnLog(runtime.store, run_id, claim.record.session_id)
    try:
        history = await turn_log.history() if turn_log else None
        request = build_request(claim, history)
        if turn_log:
            await turn_log.record_user(request.message)
        if attempt == 1:
            await sink.emit(
                EventType.RUN_STARTED,
                {
                    "attempt": attempt,
                    "user_message": {"role": "user", "content": request.message},
                    "runtime": claim.record.route,
                },
            )
        else:
            await sink.emit(EventType.RUN_RESTARTED, {"attempt": attempt})
        result = await runtime.backend.run_turn(request, sink, active.token)
        if turn_log:
            await turn_log.record_reply(result)
    except TurnCancelled:
        if active.lease_lost:
            log.warning("run %s attempt %d lost its lease; stopped the turn", run_id, attempt)
            return "lease_lost"
        await _settle(repo, run_id, attempt, RunStatus.CANCELLED, EventType.RUN_CANCELLED, {}, {})
        return "cancelled"
    except AgentError as exc:
        await _fail(repo, run_id, attempt, str(exc), "agent_error")
        return "failed"
    except LeaseLost:
        log.warning("run %s attempt %d lost its lease; its writes are fenced", run_id, attempt)
        return "lease_lost"
    except StoreError as exc:
        log.error("run %s: session store failed: %s", run_id, exc)
        await _fail(repo, run_id, attempt, "session store unavailable", "session_db_unavailable")
        return "failed"
    except EventPublishFailed as exc:
        log.error("run %s: Redis unreachable while publishing: %s", run_id, exc)
        await _fail(repo, run_id, attempt, "event publishing failed: Redis unreachable", "redis")
        return "failed"
    except asyncio.CancelledError:
        await asyncio.shield(_hand_back(repo, run_id, attempt))
        raise
    except Exception as exc:
        log.exception("run %s failed in the worker", run_id)
        await _fail(repo, run_id, attempt, f"internal error ({type(exc).__name__})", "internal")
        return "failed"
    await _complete(repo, run_id, attempt, result)
    return "completed"


async def _settle(
    repo: RunRepository,
    run_id: str,
    attempt: int,
    status: RunStatus,
    event_type: EventType,
    data: dict[str, Any],
    fields: dict[str, str],
) -> None:
    try:
        written = await repo.finish(run_id, attempt, status, event_type, data, fields)
    except Exception:
        # The lease will lapse and the reaper settles the run; log and move on.
        log.exception("run %s: could not write its terminal event", run_id)
        return
    if written is None:
        log.warning("run %s attempt %d: terminal write fenced off", run_id, attempt)


async def _fail(repo: RunRepository, run_id: str, attempt: int, error: str, reason: str) -> None:
    await _settle(
        repo,
        run_id,
        attempt,
        RunStatus.FAILED,
        EventType.RUN_FAILED,
        {"error": error, "reason": reason},
        {"error": error, "reason": reason},
    )


async def _complete(repo: RunRepository, run_id: str, attempt: int, result: AgentResult) -> None:
    usage = result.usage.as_dict()
    await _settle(
        repo,
        run_id,
        attempt,
        RunStatus.COMPLETED,
        EventType.RUN_COMPLETED,
        {
            "output": result.output,
            "usage": usage,
            "messages": result.messages,
            "runtime": result.runtime,
        },
        {"output": result.output, "usage": json.dumps(usage)},
    )


async def _hand_back(repo: RunRepository, run_id: str, attempt: int) -> None:
    """Worker shutdown: give the run back to the queue, or cancel it if a stop is pending."""
    try:
        verdict = await repo.release(run_id, attempt)
        if verdict == "stopping":
            await _settle(
                repo, run_id, attempt, RunStatus.CANCELLED, EventType.RUN_CANCELLED, {}, {}
            )
    except Exception:
        log.exception("run %s: hand-back failed; the reaper will settle it", run_id)
