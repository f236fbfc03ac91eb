"""Scheduled jobs (``/api/jobs``) and the runs they fired, for both SQL backends.

Upstream keeps jobs in a JSON file per host; here they live beside the sessions, so every API
replica and every worker sees the same jobs. A job's schedule is stored parsed (JSON) with its
next tick as epoch seconds, indexed, so "what is due" is one range query. Each fire is one
``job_runs`` row keyed by its run id, which is what makes recording a fire idempotent: the
scheduler may be told about the same tick by several workers, and only the first insert counts
(and advances the schedule, and counts down ``repeat``). Only the latest ``KEPT_RUNS`` fires of
a job are kept, as upstream keeps its latest outputs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hermes_queue.store.backend import Conn, UniqueViolation
from hermes_queue.store.base import SessionExists, sanitize_title
from hermes_queue.store.sessions import SessionRowsMixin
from hermes_queue.tenancy.keys import DEFAULT_TENANT

KEPT_RUNS = 50
JOB_SOURCE = "cron"
SCHEDULED, PAUSED, COMPLETED = "scheduled", "paused", "completed"
# Columns a caller may change with update_job (the rest move only through record_fire).
UPDATABLE = frozenset(
    {
        "name",
        "prompt",
        "schedule",
        "skills",
        "deliver",
        "repeat_times",
        "enabled",
        "state",
        "paused_at",
        "paused_reason",
        "next_run_at",
    }
)
_JSON_COLUMNS = frozenset({"schedule", "skills", "origin"})


@dataclass(frozen=True)
class JobRunRow:
    """One fire of a job: the run it created and, once settled, how that run ended."""

    run_id: str
    job_id: str
    trigger: str  # "schedule" or "manual"
    tick: float | None  # the scheduled instant (None for a manual run)
    fired_at: float
    status: str = "queued"
    output: str | None = None
    error: str | None = None
    finished_at: float | None = None


@dataclass(frozen=True)
class JobRow:
    id: str
    name: str
    prompt: str
    schedule: dict[str, Any]
    session_id: str
    created_at: float
    skills: list[str] = field(default_factory=list)
    deliver: str = "local"
    repeat_times: int | None = None
    repeat_completed: int = 0
    enabled: bool = True
    state: str = SCHEDULED
    paused_at: float | None = None
    paused_reason: str | None = None
    next_run_at: float | None = None
    last_run_at: float | None = None
    last_run_id: str | None = None
    last_status: str | None = None
    last_error: str | None = None
    origin: dict[str, Any] | None = None
    # Filled by get_job / list_jobs: the row of last_run_id.
    last_run: JobRunRow | None = None
    # Its owner (tenancy/keys.py): its session and the runs it fires are that tenant's too.
    tenant: str = DEFAULT_TENANT


@dataclass(frozen=True)
class FireRecord:
    """What record_fire writes: the run a tick (or a manual run) created, and for a scheduled
    fire the tick that comes next (None: the schedule has no more)."""

    job_id: str
    run_id: str
    trigger: str
    fired_at: float
    tick: float | None = None
    next_run_at: float | None = None


_JOB_COLUMNS = (
    "id",
    "name",
    "prompt",
    "schedule",
    "skills",
    "deliver",
    "repeat_times",
    "repeat_completed",
    "enabled",
    "state",
    "paused_at",
    "paused_reason",
    "created_at",
    "next_run_at",
    "last_run_at",
    "last_run_id",
    "last_status",
    "last_error",
    "session_id",
    "origin",
    "tenant",
)
_INSERT_JOB = (
    f"INSERT INTO jobs ({', '.join(_JOB_COLUMNS)}) VALUES ({', '.join('?' * len(_JOB_COLUMNS))})"
)
_INSERT_RUN = (
    "INSERT INTO job_runs (run_id, job_id, trigger, tick, fired_at, status)"
    " VALUES (?, ?, ?, ?, ?, 'queued') ON CONFLICT (run_id) DO NOTHING RETURNING run_id"
)
_PRUNE_RUNS = (
    "DELETE FROM job_runs WHERE job_id = ? AND run_id NOT IN (SELECT run_id FROM job_runs"
    " WHERE job_id = ? ORDER BY fired_at DESC, run_id DESC LIMIT ?)"
)


def _job(raw: Mapping[str, Any], last_run: JobRunRow | None = None) -> JobRow:
    return JobRow(
        id=raw["id"],
        name=raw["name"],
        prompt=raw["prompt"],
        schedule=json.loads(raw["schedule"]),
        skills=json.loads(raw["skills"]),
        deliver=raw["deliver"],
        repeat_times=raw["repeat_times"],
        repeat_completed=int(raw["repeat_completed"]),
        enabled=bool(raw["enabled"]),
        state=raw["state"],
        paused_at=raw["paused_at"],
        paused_reason=raw["paused_reason"],
        created_at=float(raw["created_at"]),
        next_run_at=raw["next_run_at"],
        last_run_at=raw["last_run_at"],
        last_run_id=raw["last_run_id"],
        last_status=raw["last_status"],
        last_error=raw["last_error"],
        session_id=raw["session_id"],
        origin=json.loads(raw["origin"]) if raw["origin"] else None,
        last_run=last_run,
        tenant=raw.get("tenant") or DEFAULT_TENANT,
    )


def _run(raw: Mapping[str, Any]) -> JobRunRow:
    return JobRunRow(
        run_id=raw["run_id"],
        job_id=raw["job_id"],
        trigger=raw["trigger"],
        tick=raw["tick"],
        fired_at=float(raw["fired_at"]),
        status=raw["status"],
        output=raw["output"],
        error=raw["error"],
        finished_at=raw["finished_at"],
    )


def _column_value(name: str, value: Any) -> Any:
    if name in _JSON_COLUMNS:
        return None if value is None else json.dumps(value, ensure_ascii=False)
    if name == "enabled":
        return int(bool(value))
    return value


class JobsMixin(SessionRowsMixin):
    """The ``SessionStore`` job operations over the backend's connections."""

    async def _job_session(self, conn: Conn, job: JobRow) -> None:
        """The job's own session, where its fires' transcript accumulates (kept if it exists).
        Titled after the job when that title is free (titles are unique per tenant); the job's
        tenant's."""
        title = sanitize_title(f"Job {job.id}: {job.name}"[:100])
        taken = "SELECT id FROM sessions WHERE tenant = ? AND title = ?"
        if await conn.fetchrow(taken, job.tenant, title):
            title = None
        try:
            await self._insert_session(
                conn, job.session_id, source=JOB_SOURCE, title=title, tenant=job.tenant
            )
        except SessionExists:
            pass

    async def create_job(self, job: JobRow) -> JobRow:
        """Insert the job and, in the same transaction, its session."""
        values = [_column_value(c, getattr(job, c)) for c in _JOB_COLUMNS]
        async with self._write() as conn:
            await self._job_session(conn, job)
            await conn.execute(_INSERT_JOB, *values)
            raw = await conn.fetchrow("SELECT * FROM jobs WHERE id = ?", job.id)
        assert raw is not None
        return _job(raw)

    async def ensure_job_session(self, job: JobRow) -> None:
        """Recreate the job's session if someone deleted it (its next fire writes there)."""
        async with self._write() as conn:
            await self._job_session(conn, job)

    async def _last_runs(self, conn: Conn, rows: list[dict[str, Any]]) -> list[JobRow]:
        ids = [r["last_run_id"] for r in rows if r["last_run_id"]]
        runs: dict[str, JobRunRow] = {}
        if ids:
            marks = ", ".join("?" * len(ids))
            found = await conn.fetch(f"SELECT * FROM job_runs WHERE run_id IN ({marks})", *ids)
            runs = {r["run_id"]: _run(r) for r in found}
        return [_job(r, runs.get(r["last_run_id"] or "")) for r in rows]

    async def get_job(self, id: str) -> JobRow | None:
        async with self._read() as conn:
            raw = await conn.fetchrow("SELECT * FROM jobs WHERE id = ?", id)
            return (await self._last_runs(conn, [raw]))[0] if raw else None

    async def list_jobs(
        self, *, include_disabled: bool = False, tenant: str | None = None
    ) -> list[JobRow]:
        """``tenant``: that tenant's jobs only (None: every tenant's, as the CLI lists them)."""
        clauses, args = [] if include_disabled else ["enabled = 1"], []
        if tenant is not None:
            clauses.append("tenant = ?")
            args.append(tenant)
        where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
        async with self._read() as conn:
            rows = await conn.fetch(f"SELECT * FROM jobs{where} ORDER BY created_at, id", *args)
            return await self._last_runs(conn, rows)

    async def update_job(self, id: str, changes: Mapping[str, Any]) -> JobRow | None:
        """Set the given columns (``UPDATABLE`` only); None when the job does not exist."""
        unknown = set(changes) - UPDATABLE
        if unknown:
            raise ValueError(f"not updatable: {sorted(unknown)}")
        async with self._write() as conn:
            if changes:
                sets = ", ".join(f"{name} = ?" for name in changes)
                values = [_column_value(name, value) for name, value in changes.items()]
                await conn.execute(f"UPDATE jobs SET {sets} WHERE id = ?", *values, id)
            raw = await conn.fetchrow("SELECT * FROM jobs WHERE id = ?", id)
            return (await self._last_runs(conn, [raw]))[0] if raw else None

    async def delete_job(self, id: str) -> bool:
        """Delete the job and its fire records; its session (the transcript) stays."""
        async with self._write() as conn:
            await conn.execute("DELETE FROM job_runs WHERE job_id = ?", id)
            return await conn.execute("DELETE FROM jobs WHERE id = ?", id) > 0

    async def due_jobs(self, now: float, limit: int = 100) -> list[JobRow]:
        """Enabled jobs whose next tick is at or before ``now``, most overdue first."""
        async with self._read() as conn:
            rows = await conn.fetch(
                "SELECT * FROM jobs WHERE next_run_at <= ? AND enabled = 1"
                " ORDER BY next_run_at, id LIMIT ?",
                now,
                limit,
            )
        return [_job(r) for r in rows]

    async def job_fire_recorded(self, run_id: str) -> bool:
        async with self._read() as conn:
            row = await conn.fetchrow("SELECT run_id FROM job_runs WHERE run_id = ?", run_id)
        return row is not None

    async def record_fire(self, fire: FireRecord) -> bool:
        """Record a fire once: False when this run id was already recorded (or the job is
        gone). A scheduled fire counts down ``repeat`` and, if the job still waits for
        ``fire.tick``, moves it to ``fire.next_run_at``; an exhausted job, or a one-shot with
        nothing next, is disabled and ``completed``."""
        async with self._write() as conn:
            raw = await conn.fetchrow(
                "SELECT * FROM jobs WHERE id = ?" + self.for_update, fire.job_id
            )
            if raw is None:
                return False
            args = (fire.run_id, fire.job_id, fire.trigger, fire.tick, fire.fired_at)
            try:
                if await conn.fetchrow(_INSERT_RUN, *args) is None:
                    return False
            except UniqueViolation:
                return False
            changes: dict[str, Any] = {"last_run_at": fire.fired_at, "last_run_id": fire.run_id}
            if fire.trigger == "schedule":
                changes.update(_advance(raw, fire))
            sets = ", ".join(f"{name} = ?" for name in changes)
            await conn.execute(
                f"UPDATE jobs SET {sets} WHERE id = ?", *changes.values(), fire.job_id
            )
            await conn.execute(_PRUNE_RUNS, fire.job_id, fire.job_id, KEPT_RUNS)
        return True

    async def job_runs(self, job_id: str, limit: int = 20) -> list[JobRunRow]:
        """The job's latest fires, newest first."""
        async with self._read() as conn:
            rows = await conn.fetch(
                "SELECT * FROM job_runs WHERE job_id = ? ORDER BY fired_at DESC, run_id DESC"
                " LIMIT ?",
                job_id,
                limit,
            )
        return [_run(r) for r in rows]

    async def open_job_runs(self, limit: int = 500) -> list[JobRunRow]:
        """Fires whose run has not been seen to end yet, oldest first."""
        async with self._read() as conn:
            rows = await conn.fetch(
                "SELECT * FROM job_runs WHERE finished_at IS NULL ORDER BY fired_at LIMIT ?",
                limit,
            )
        return [_run(r) for r in rows]

    async def settle_job_run(
        self,
        run_id: str,
        *,
        status: str,
        output: str | None = None,
        error: str | None = None,
        finished_at: float | None = None,
        last_status: str | None = None,
    ) -> bool:
        """Note a fire's run status; with ``finished_at``, its end (once) and, if it is the
        job's latest fire, the job's ``last_status``/``last_error``. True if anything changed."""
        async with self._write() as conn:
            if finished_at is None:  # still queued or running
                changed = await conn.execute(
                    "UPDATE job_runs SET status = ? WHERE run_id = ? AND finished_at IS NULL"
                    " AND status <> ?",
                    status,
                    run_id,
                    status,
                )
                return changed > 0
            changed = await conn.execute(
                "UPDATE job_runs SET status = ?, output = ?, error = ?, finished_at = ?"
                " WHERE run_id = ? AND finished_at IS NULL",
                status,
                output,
                error,
                finished_at,
                run_id,
            )
            if changed:
                await conn.execute(
                    "UPDATE jobs SET last_status = ?, last_error = ? WHERE last_run_id = ?",
                    last_status,
                    error,
                    run_id,
                )
        return changed > 0


def _advance(raw: Mapping[str, Any], fire: FireRecord) -> dict[str, Any]:
    """How a scheduled fire moves its job on (see ``record_fire``)."""
    completed = int(raw["repeat_completed"]) + 1
    changes: dict[str, Any] = {"repeat_completed": completed}
    times = raw["repeat_times"]
    exhausted = times is not None and completed >= times
    waiting_for_this_tick = raw["next_run_at"] is not None and raw["next_run_at"] == fire.tick
    if exhausted or (waiting_for_this_tick and fire.next_run_at is None):
        changes.update(enabled=0, state=COMPLETED, next_run_at=None)
    elif waiting_for_this_tick:
        changes["next_run_at"] = fire.next_run_at
    return changes
