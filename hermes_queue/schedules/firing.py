"""Firing a job: the run one tick (or ``POST /api/jobs/{id}/run``) creates, recorded under it.

Exactly once per tick, whatever the number of workers: the run of a tick has a deterministic
id (``tick_run_id``: a digest of namespace, job and tick), and the script that creates a run
refuses an id that exists, in the same atomic step that writes the record and queues the run
(``runs/start.py``, the way every run is started).
That is arq's own scheme for cron jobs (one job id per tick, enqueued once) applied to our
run-creating script. Every worker that finds the tick due tries; one creates the run, the others
are told it exists. Then whichever gets there first records the fire in SQL
(``store.record_fire``, keyed by the same run id), which moves the job to its next tick and
counts down ``repeat``, also once. A worker killed between the two steps leaves the tick due;
the next pass (any worker) finds the run already there and only records it.

A fire is an ordinary session turn on the job's own session, so its transcript accumulates
there, and it is pollable and followable under ``/v1/runs``. How each run ended is copied
back under the job (``settle_open``) by the schedulers' passes and by API reads.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import tzinfo
from typing import Protocol
from zoneinfo import ZoneInfo

from hermes_queue.config import ScheduleSettings
from hermes_queue.routing import RoutingConfig, Selection, parse_requested, select_runtime
from hermes_queue.runs.model import NewRun, Persist, RunRecord, RunStatus
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.start import RunStarter
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.schedules.parsing import Schedule, next_after
from hermes_queue.store.jobs import FireRecord, JobRow, JobRunRow
from hermes_queue.store.protocol import SessionStore

log = logging.getLogger(__name__)

SCHEDULE, MANUAL = "schedule", "manual"
# The turn's message when a job has skills but no prompt of its own.
SKILLS_ONLY_MESSAGE = "Run the skills named in your instructions."
LOST_RUN = "the run record expired before its end was recorded"


class FireObserver(Protocol):
    """Metrics hooks (``metrics/processes.py``): fires made by this process, ticks a catch-up
    skipped."""

    def job_fired(self, trigger: str) -> None: ...

    def job_ticks_missed(self, count: int) -> None: ...


def job_timezone(settings: ScheduleSettings) -> tzinfo:
    return ZoneInfo(settings.timezone)


def tick_run_id(namespace: str, job_id: str, tick: float) -> str:
    """The run id of one tick of one job: the same on every worker, unique per tick."""
    digest = hashlib.sha256(f"{namespace}:{job_id}:{round(tick * 1000)}".encode()).hexdigest()
    return f"run_{digest[:32]}"


def job_instructions(job: JobRow) -> str:
    """The turn's instructions: what it is running as, and the job's skills (the agent loads
    them by name with its own skill tools)."""
    text = (
        f"You are running as the scheduled job {job.name!r} (id {job.id}), not in a live "
        "conversation. Your final answer is stored as this run's output."
    )
    if job.skills:
        text += f" Before the task, load and follow these skills: {', '.join(job.skills)}."
    return text


@dataclass(frozen=True)
class FireSession:
    """The session a fire runs on (the job session's live tip) and its runtime."""

    session_id: str
    selection: Selection


@dataclass
class Firing:
    """Fires jobs and keeps their fire records in step with the runs (any process).

    ``runs`` starts the fires' runs (no reader: nobody's request reads a fire); ``routing``
    decides their runtime and ``tz`` reads their schedules."""

    store: SessionStore
    runs: RunStarter
    routing: RoutingConfig
    tz: tzinfo
    observer: FireObserver | None = None

    @property
    def repository(self) -> RunRepository:
        return self.runs.runs

    async def create_run(self, job: JobRow, fire: FireSession, run_id: str) -> bool:
        """Create the run of one fire of ``job`` in ``fire``'s session; False when ``run_id``
        already exists. The one place a fire becomes a run: a session turn, queued behind a
        turn already active there rather than refused."""
        run = NewRun(
            run_id=run_id,
            session_id=fire.session_id,
            request=TurnRequest(
                message=job.prompt or SKILLS_ONLY_MESSAGE,
                instructions=job_instructions(job),
                path_id=job.session_id,
            ),
            route=fire.selection,
            model=fire.selection.model or self.routing.model_name,
            persist=Persist.SESSION,
            tenant=job.tenant,  # the job's tenant owns its runs
        )
        admission = await self.runs.start_in_session(run, "enqueue")
        return admission.verdict != "exists"

    async def fire_session(self, job: JobRow) -> FireSession:
        """Where a fire of ``job`` runs: the job's session (created on first use), at its live
        tip, with the runtime chosen as for a session chat turn naming no model, so a model
        lock set on that session holds."""
        store = self.store
        session = await store.get_session(job.session_id)
        if session is None:
            await store.ensure_job_session(job)
            session = await store.get_session(job.session_id)
        model_config = session.model_config if session else None
        column = session.model if session else None
        selection = select_runtime(parse_requested({}), model_config, column, self.routing)
        return FireSession(await store.resolve_tip(job.session_id), selection)

    async def fire_tick(self, job: JobRow, now: float) -> bool:
        """Fire the due tick ``job.next_run_at`` (at most once across the deployment); True
        when this call recorded it."""
        tick = job.next_run_at
        if tick is None:
            return False
        schedule = Schedule.from_stored(job.schedule)
        next_tick, missed = next_after(schedule, tick, now, self.tz)
        fire_session = await self.fire_session(job)
        base_run_id = tick_run_id(self.repository.keys.namespace, job.id, tick)
        run_id = await self.runs.tick_run_id(base_run_id, fire_session.session_id)
        created = False
        # Recorded already: its run may have expired since, and must not be created again.
        if not await self.store.job_fire_recorded(run_id):
            created = await self.create_run(job, fire_session, run_id)
        fire = FireRecord(job.id, run_id, SCHEDULE, now, tick=tick, next_run_at=next_tick)
        recorded = await self.store.record_fire(fire)
        if created:
            log.info("job %s fired tick %.3f as run %s", job.id, tick, run_id)
            if self.observer is not None:
                self.observer.job_fired(SCHEDULE)
        if recorded and missed:
            log.warning("job %s: %d tick(s) missed while no worker fired them", job.id, missed)
            if self.observer is not None:
                self.observer.job_ticks_missed(missed)
        return recorded

    async def fire_now(self, job: JobRow, now: float) -> str:
        """A manual run (``POST /api/jobs/{id}/run``): fires at once, leaves the schedule and
        ``repeat`` alone. Returns the run id."""
        fire_session = await self.fire_session(job)
        run_id = self.runs.new_run_id(fire_session.session_id)
        await self.create_run(job, fire_session, run_id)
        await self.store.record_fire(FireRecord(job.id, run_id, MANUAL, now))
        if self.observer is not None:
            self.observer.job_fired(MANUAL)
        return run_id

    async def settle(self, fires: list[JobRunRow]) -> None:
        """Copy the status of each fire's run (and, once ended, its output or error) into
        its record."""
        for fire in fires:
            if fire.finished_at is not None:
                continue
            record = await self.repository.get(fire.run_id)
            await self._settle_one(fire, record)

    async def settle_open(self) -> None:
        await self.settle(await self.store.open_job_runs())

    async def _settle_one(self, fire: JobRunRow, record: RunRecord | None) -> None:
        if record is None:
            await self.store.settle_job_run(
                fire.run_id,
                status="unknown",
                error=LOST_RUN,
                finished_at=fire.fired_at,
                last_status="error",
            )
        elif record.status == RunStatus.COMPLETED:
            await self.store.settle_job_run(
                fire.run_id,
                status=record.status,
                output=record.output,
                finished_at=record.updated_at,
                last_status="ok",
            )
        elif record.terminal:
            await self.store.settle_job_run(
                fire.run_id,
                status=record.status,
                error=record.error or f"the run was {record.status}",
                finished_at=record.updated_at,
                last_status="error",
            )
        elif record.status != fire.status:  # queued → running…; unchanged: no write
            await self.store.settle_job_run(fire.run_id, status=record.status)
