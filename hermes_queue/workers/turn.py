"""The run job: claim the run, drive the agent backend, publish every event, settle the run.

The queue delivers at least once, so the job starts by claiming the run; a run that is finished,
gone or held by a live attempt makes the job a no-op. A claim is an ``Attempt``
(``runs/attempt.py``), through which every write of this turn goes. Whatever happens after it,
the run ends with exactly one terminal event written by this attempt, or is handed back to the
queue (worker shutdown), or is left to the reaper (this attempt lost its lease).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hermes_queue.agents.base import (
    AgentBackend,
    AgentError,
    AgentResult,
    CancelToken,
    ProviderAuthError,
    TurnCancelled,
)
from hermes_queue.agents.media import inline_media
from hermes_queue.agents.steps import HandBack, RunBudgetExceeded
from hermes_queue.logs import attempt_var, run_id_var, session_id_var, worker_var
from hermes_queue.metrics.labels import OUTCOMES
from hermes_queue.metrics.processes import WorkerMetrics
from hermes_queue.routing import LockMismatch, check_lock_runtime, runtime_metadata
from hermes_queue.runs.attempt import Attempt
from hermes_queue.runs.model import FailReason
from hermes_queue.runs.repository import RunRepository
from hermes_queue.store.base import StoreError
from hermes_queue.store.protocol import SessionStore
from hermes_queue.workers.appends import Event, EventPublishFailed, LeaseLost
from hermes_queue.workers.approval_wait import Wakeup
from hermes_queue.workers.lease_clock import lease_clock
from hermes_queue.workers.lease_keeper import LEASE_LOST, LeaseKeeper
from hermes_queue.workers.persistence import SessionTurnLog
from hermes_queue.workers.resume import Unresumable, start_attempt
from hermes_queue.workers.sink import RunEventSink

if TYPE_CHECKING:
    from hermes_queue.tracing.spans import Tracing

log = logging.getLogger(__name__)


@dataclass
class ActiveRun:
    attempt: Attempt
    token: CancelToken
    lease_lost: bool = False
    timed_out: bool = False
    # Rung when an approval answer for this run is published (the sink also polls).
    approvals: Wakeup = field(default_factory=Wakeup)


@dataclass
class WorkerRuntime:
    """What every job of one worker process shares."""

    worker_id: str
    repository: RunRepository
    backend: AgentBackend
    keeper: LeaseKeeper | None = None
    store: SessionStore | None = None
    turn_timeout: float = 3600.0
    # True once the worker stops taking jobs: a cancelled turn is then handed back.
    shutting_down: Callable[[], bool] = lambda: False
    active: dict[str, ActiveRun] = field(default_factory=dict)
    metrics: WorkerMetrics | None = None
    # This process's tracing (hermes_queue/tracing/), when on.
    tracing: Tracing | None = None
    # The agent's Hermes home, whose secret files a reply's MEDIA: tags may never deliver.
    hermes_home: str = ""
    # Told the id of a run this process settled that wants webhook deliveries (its end
    # queued them): the webhook sender reads that outbox at once.
    deliveries_queued: Callable[[str], None] | None = None

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

    def approval_answered(self, run_id: str) -> None:
        """An approval answer for this run was recorded by some API replica (pub/sub)."""
        run = self.active.get(run_id)
        if run is not None:
            run.approvals.notify()


async def run_turn(runtime: WorkerRuntime, run_id: str) -> str:
    """One delivery of a run's job (the queue delivers at least once)."""
    run_id_var.set(run_id)
    traced = runtime.tracing
    claim_started = time.time_ns() if traced is not None else 0
    claim_sent = lease_clock()  # the lease the claim sets runs from after this
    attempt = await _claim(runtime, run_id)
    if attempt is None:
        return "skipped"
    # The attempt's spans, children of the request that started the run (tracing/attempts.py).
    turn_trace = (
        traced.begin_turn(attempt.record, attempt.number, runtime.worker_id, claim_started)
        if traced
        else None
    )
    # Every log line of this attempt (agent, store, sink) then names it; the queue runs each
    # job in its own task, so these settings end with the job.
    session_id_var.set(attempt.record.session_id)
    attempt_var.set(attempt.number)
    worker_var.set(runtime.worker_id)
    claimed = time.monotonic()
    if runtime.metrics is not None and attempt.number == 1:
        runtime.metrics.picked_up(attempt.record.created_at)
    active = ActiveRun(attempt=attempt, token=CancelToken())
    runtime.active[run_id] = active
    if runtime.keeper is not None:
        runtime.keeper.track(attempt, claim_sent)
    timer = asyncio.get_running_loop().call_later(runtime.turn_timeout, _time_out, active)
    ended = "interrupted"
    try:
        ended = await _drive(runtime, active)
    finally:
        if turn_trace is not None:
            turn_trace.end(ended)
        timer.cancel()
        # A later delivery of the same run may have replaced this entry: leave that one alone.
        if runtime.active.get(run_id) is active:
            del runtime.active[run_id]
        if runtime.keeper is not None:
            runtime.keeper.untrack(attempt)
        if runtime.deliveries_queued is not None and attempt.record.webhook_outbox:
            runtime.deliveries_queued(run_id)
    if runtime.metrics is not None and ended in OUTCOMES:
        runtime.metrics.ended(ended, time.monotonic() - claimed)
    return ended


async def _claim(runtime: WorkerRuntime, run_id: str) -> Attempt | None:
    """Claim, and if the job is cancelled mid-claim, still hand back what was claimed."""
    claiming = asyncio.ensure_future(runtime.repository.claim(run_id, runtime.worker_id))
    try:
        return await asyncio.shield(claiming)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            attempt = await claiming
            if attempt is not None:
                await attempt.hand_back()
        raise


def _time_out(active: ActiveRun) -> None:
    active.timed_out = True
    active.token.cancel("turn timed out")


async def _drive(runtime: WorkerRuntime, active: ActiveRun) -> str:
    """Run the turn; whatever happens, end it with one terminal write, a hand-back, or
    nothing at all when the lease is lost (the reaper's then)."""
    attempt = active.attempt
    first_event = None
    if runtime.metrics is not None and attempt.number == 1:
        # The agent's first event: what a user waits for (time-to-first-event histogram).
        first_event = functools.partial(runtime.metrics.first_event, attempt.record.created_at)
    sink = RunEventSink(
        attempt,
        cancel=active.token,
        wakeup=active.approvals,
        hand_back=runtime.shutting_down,
        on_first_event=first_event,
        deadline=_budget_deadline(attempt),
    )
    turn_log = None
    if attempt.record.persist and runtime.store is not None:
        record = attempt.record
        turn_log = SessionTurnLog(runtime.store, attempt.run_id, record.session_id, record.tenant)
    try:
        request = await start_attempt(attempt, runtime.repository, sink, turn_log)
        result = await runtime.backend.run_turn(request, sink, active.token)
        result = _checked_runtime(attempt, result)
        unwritten = await _reply_recorded(sink, turn_log, result, _lease_held(runtime, attempt))
    except TurnCancelled as stopped:
        return await _end_cancelled(sink, active, turn_log, stopped.messages)
    except HandBack:
        # The worker is stopping and the step just recorded was this attempt's last: another
        # worker resumes the run from it (a drain lasts one step, not one turn).
        await attempt.hand_back()
        log.info("run %s attempt %d handed back after a step", attempt.run_id, attempt.number)
        return "handed_back"
    except Unresumable as lost:
        return await _end_unresumable(attempt, turn_log, lost)
    except RunBudgetExceeded:
        # Stopped at a step boundary; the steps recorded up to here stay with the run.
        return await _end_failed(sink, FailReason.RUN_BUDGET, _budget_error(attempt))
    except LeaseLost:
        log.warning(
            "run %s attempt %d lost its lease; its writes are fenced",
            attempt.run_id,
            attempt.number,
        )
        return "lease_lost"
    except EventPublishFailed as exc:
        log.error("run %s: Redis unreachable while publishing: %s", attempt.run_id, exc)
        await attempt.fail(FailReason.REDIS, "event publishing failed")
        return "failed"
    except asyncio.CancelledError:
        if runtime.shutting_down():
            await asyncio.shield(attempt.hand_back())
        else:  # the queue's own job timeout, a backstop behind ours
            await asyncio.shield(attempt.fail(FailReason.TIMEOUT, "turn timed out"))
        raise
    except Exception as exc:
        reason, error = _failure(attempt.run_id, exc)
        return await _end_failed(sink, reason, error)
    await attempt.complete(
        output=result.output,
        usage=result.usage.as_dict(),
        messages=result.messages,
        runtime=result.runtime,
        # The reply as shown: MEDIA: image tags inlined here, where the agent's files are
        # (upstream shows them inlined in its session chat and chat completions replies; the
        # run's output, a stream's deltas and the transcript keep the tags).
        shown=inline_media(result.output, hermes_home=runtime.hermes_home),
        streamed=sink.text_streamed,
        truncated=result.finish_reason == "length",
        unwritten=unwritten,
    )
    return "completed"


async def _reply_recorded(
    sink: RunEventSink,
    turn_log: SessionTurnLog | None,
    result: AgentResult,
    lease_held: Callable[[], bool],
) -> list[Event]:
    """The reply in the session's transcript, if the turn keeps one; the events still
    waiting, which the terminal write is to carry along: one script call, not two.

    An attempt writes its reply into the transcript only while it holds the run. When the
    lease keeper cannot vouch for that by the clock (``LeaseKeeper.surely_held``: a process
    that froze past its lease, thawed, or no keeper), a fenced call first writes what is
    waiting (or nothing) and stops the attempt (``LeaseLost``) if it lost the run. The events
    are taken first either way, so a failure of an append already in flight stops the turn
    before the transcript write too."""
    unwritten = await sink.take_unwritten()
    if turn_log is None:
        return unwritten
    if not lease_held():
        await sink.write_fenced(unwritten)
        unwritten = []
    await turn_log.record_reply(result)
    return unwritten


def _lease_held(runtime: WorkerRuntime, attempt: Attempt) -> Callable[[], bool]:
    keeper = runtime.keeper
    return functools.partial(keeper.surely_held, attempt) if keeper else lambda: False


def _budget_deadline(attempt: Attempt) -> float | None:
    """When the run's ``run_budget_seconds`` is spent, counted from its first claim (the time
    it waited in the queue is not), whichever attempt this is; None without a budget."""
    policy = attempt.record.request.policy
    if policy is None or policy.run_budget_seconds is None:
        return None
    started = attempt.record.first_started_at or time.time()
    return started + policy.run_budget_seconds


def _budget_error(attempt: Attempt) -> str:
    policy = attempt.record.request.policy
    seconds = policy.run_budget_seconds if policy is not None else None
    return f"Run budget exceeded: the run used its run_budget_seconds ({seconds} s)"


# What the turn's own errors fail the run with (the first that matches), the message being
# the error's text, which holds no secret.
_TURN_ERRORS: tuple[tuple[type[Exception], FailReason], ...] = (
    # Upstream's controlled reply: session chat shows it as the assistant's answer.
    (ProviderAuthError, FailReason.PROVIDER_AUTH),
    (LockMismatch, FailReason.LOCK_MISMATCH),
    (AgentError, FailReason.AGENT_ERROR),
)


def _failure(run_id: str, exc: Exception) -> tuple[FailReason, str]:
    """Why a turn that raised fails, and the error clients are shown."""
    for kind, reason in _TURN_ERRORS:
        if isinstance(exc, kind):
            return reason, str(exc)
    if isinstance(exc, StoreError):
        log.error("run %s: session store failed: %s", run_id, exc)
        return FailReason.SESSION_DB_UNAVAILABLE, "session store unavailable"
    log.error("run %s failed in the worker", run_id, exc_info=exc)
    return FailReason.INTERNAL, f"internal error ({type(exc).__name__})"


def _checked_runtime(attempt: Attempt, result: AgentResult) -> AgentResult:
    """Under a confirmed lock the turn must have run on the locked provider and model; the
    result then reports the runtime metadata clients see (upstream-api.md §6.3 rules 6–7)."""
    selection = attempt.record.route
    actual = result.runtime or {}
    if selection.confirmed_lock:
        check_lock_runtime(
            selection, str(actual.get("provider") or ""), str(actual.get("model") or "")
        )
    return dataclasses.replace(result, runtime=runtime_metadata(selection, actual))


async def _flushed(sink: RunEventSink) -> bool:
    """Write what the backend emitted before the terminal event; False if the lease is gone."""
    try:
        await sink.flush()
    except LeaseLost:
        return False
    except Exception:
        log.exception("run %s: events before the terminal one were lost", sink.run_id)
    return True


async def _end_cancelled(
    sink: RunEventSink,
    active: ActiveRun,
    turn_log: SessionTurnLog | None,
    done: list[dict[str, Any]],
) -> str:
    attempt = active.attempt
    if active.lease_lost or not await _flushed(sink):
        log.warning(
            "run %s attempt %d lost its lease; stopped the turn", attempt.run_id, attempt.number
        )
        return "lease_lost"
    if active.timed_out:
        await attempt.fail(FailReason.TIMEOUT, "turn timed out")
        return "failed"
    if turn_log is not None:
        # Before the terminal write, which lets the session's next turn start: that turn's
        # history must already hold this one's reply as far as it went.
        try:
            await turn_log.record_interrupted(done, sink.streamed_text)
        except StoreError as exc:
            log.error("run %s: the stopped reply was not stored: %s", attempt.run_id, exc)
    await attempt.cancel()
    return "cancelled"


async def _end_unresumable(
    attempt: Attempt, turn_log: SessionTurnLog | None, lost: Unresumable
) -> str:
    """A reply shown to an OpenAI stream was cut by a lost worker: the run ends ``worker_lost``
    with its transcript as the client saw it (workers/resume.py)."""
    if turn_log is not None:
        try:
            await turn_log.record_interrupted(lost.done, lost.shown)
        except StoreError as exc:
            log.error("run %s: the cut reply was not stored: %s", attempt.run_id, exc)
    await attempt.fail(FailReason.WORKER_LOST, str(lost))
    return "failed"


async def _end_failed(sink: RunEventSink, reason: FailReason, error: str) -> str:
    if not await _flushed(sink):
        return "lease_lost"
    # Upstream's controlled provider-auth text is a reply on session chat and chat completions.
    await sink.attempt.fail(reason, error, as_reply=reason == FailReason.PROVIDER_AUTH)
    return "failed"
