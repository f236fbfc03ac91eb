"""What a client may set on a job, checked as upstream checks it, and how a job looks to it.

Pure functions from request bodies to store rows and column changes, and from rows to
upstream's job object (upstream-api.md §2, the jobs row). Every refusal is a :class:`JobInputError`
whose message is the ``error`` string of upstream's ``{"error": "…"}`` envelope; where
upstream answers a bad schedule with a 500, this answers 400.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, tzinfo
from typing import Any

from hermes_queue.schedules.parsing import (
    ONESHOT_GRACE_SECONDS,
    Schedule,
    ScheduleError,
    first_tick,
    parse_schedule,
)
from hermes_queue.schedules.prompt_scan import scan_prompt
from hermes_queue.store.jobs import COMPLETED, PAUSED, SCHEDULED, JobRow, JobRunRow

MAX_NAME_LENGTH = 200
MAX_PROMPT_LENGTH = 5000
MAX_SKILLS = 50
MAX_SKILL_NAME_LENGTH = 200
# PATCH takes these and ignores any other key (upstream's allow-list).
PATCHABLE = frozenset(
    {"name", "schedule", "prompt", "deliver", "skills", "skill", "repeat", "enabled"}
)
DELIVER_LOCAL = "local"
SESSION_PREFIX = "cron_"


class JobInputError(ValueError):
    """A request the jobs API refuses; ``str()`` is the client's error message."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def new_job_id() -> str:
    return uuid.uuid4().hex[:12]


def _name(value: Any) -> str:
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise JobInputError("Name must be a string")
    name = value.strip()
    if not name:
        raise JobInputError("Name is required")
    if len(name) > MAX_NAME_LENGTH:
        raise JobInputError(f"Name must be ≤ {MAX_NAME_LENGTH} characters")
    return name


def _prompt(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise JobInputError("Prompt must be a string")
    if len(value) > MAX_PROMPT_LENGTH:
        raise JobInputError(f"Prompt must be ≤ {MAX_PROMPT_LENGTH} characters")
    threat = scan_prompt(value) if value else ""
    if threat:
        raise JobInputError(threat)
    return value


def _schedule_text(value: Any) -> str:
    if value is not None and not isinstance(value, str):
        raise JobInputError("Schedule must be a string")
    text = (value or "").strip()
    if not text:
        raise JobInputError("Schedule is required")
    return text


def _schedule(text: str, now: float, tz: tzinfo) -> Schedule:
    try:
        return parse_schedule(text, now=now, tz=tz)
    except ScheduleError as exc:
        raise JobInputError(str(exc)) from None


def _repeat(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise JobInputError("Repeat must be a positive integer")
    return value


def _deliver(value: Any) -> str:
    if value is None or value == DELIVER_LOCAL:
        return DELIVER_LOCAL
    raise JobInputError(
        f"Unsupported deliver {str(value)[:50]!r}: only 'local' is supported here (the output "
        "stays on the job's runs and in its session; there are no messaging platforms)"
    )


def _skills(skills: Any, skill: Any = None) -> list[str]:
    """Upstream's normalisation: ``skills`` (a list or one name) wins over legacy ``skill``;
    names are stripped, blanks and repeats dropped, order kept."""
    raw = [skill] if skills is None and skill else skills
    if raw is None:
        return []
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise JobInputError("Skills must be a skill name or a list of skill names")
    names: list[str] = []
    for item in raw:
        name = item.strip()
        if len(name) > MAX_SKILL_NAME_LENGTH:
            raise JobInputError(f"Skill names must be ≤ {MAX_SKILL_NAME_LENGTH} characters")
        if name and name not in names:
            names.append(name)
    if len(names) > MAX_SKILLS:
        raise JobInputError(f"At most {MAX_SKILLS} skills")
    return names


def _first_tick(schedule: Schedule, now: float, tz: tzinfo, refusal: str) -> float:
    tick = first_tick(schedule, now, tz)
    if tick is None:  # a one-shot whose time is too far gone
        run_at = datetime.fromtimestamp(schedule.run_at or 0, tz).isoformat()
        raise JobInputError(refusal.format(run_at=run_at, grace=ONESHOT_GRACE_SECONDS))
    return tick


PAST_ONESHOT = (
    "Requested one-shot time {run_at} is more than {grace}s in the past and cannot be scheduled."
)
PAST_ONESHOT_RESUME = (
    "Cannot resume: one-shot time {run_at} is in the past (grace window: {grace}s) "
    "and will never fire."
)


def parse_create(
    body: dict[str, Any], *, now: float, tz: tzinfo, origin: dict[str, Any] | None = None
) -> JobRow:
    """A new job from a ``POST /api/jobs`` body, checked in upstream's order."""
    name = _name(body.get("name"))
    schedule_text = _schedule_text(body.get("schedule"))
    prompt = _prompt(body.get("prompt"))
    repeat = _repeat(body.get("repeat"))
    deliver = _deliver(body.get("deliver"))
    skills = _skills(body.get("skills"))
    if not prompt.strip() and not skills:
        raise JobInputError("Prompt is required (or skills to run)")
    schedule = _schedule(schedule_text, now, tz)
    if schedule.kind == "once" and repeat is None:
        repeat = 1  # upstream: a one-shot runs once
    job_id = new_job_id()
    return JobRow(
        id=job_id,
        name=name,
        prompt=prompt,
        schedule=schedule.to_stored(),
        session_id=SESSION_PREFIX + job_id,
        created_at=now,
        skills=skills,
        deliver=deliver,
        repeat_times=repeat,
        next_run_at=_first_tick(schedule, now, tz, PAST_ONESHOT),
        origin=origin,
    )


def _exhausted(job: JobRow, times: int | None) -> bool:
    return times is not None and job.repeat_completed >= times


def pause_changes(job: JobRow, now: float, reason: str | None = None) -> dict[str, Any]:
    return {
        "enabled": False,
        "state": PAUSED,
        "paused_at": job.paused_at if job.state == PAUSED else now,
        "paused_reason": reason,
        "next_run_at": None,
    }


def resume_changes(
    job: JobRow, now: float, tz: tzinfo, *, schedule: Schedule | None = None
) -> dict[str, Any]:
    """Enable a job again from ``now``: its next tick is computed afresh (missed ticks of the
    paused time are not made up)."""
    if _exhausted(job, job.repeat_times):
        raise JobInputError(
            f"Repeat limit reached ({job.repeat_completed} of {job.repeat_times} runs done): "
            "raise repeat to run this job again"
        )
    schedule = schedule or Schedule.from_stored(job.schedule)
    return {
        "enabled": True,
        "state": SCHEDULED,
        "paused_at": None,
        "paused_reason": None,
        "next_run_at": _first_tick(schedule, now, tz, PAST_ONESHOT_RESUME),
    }


def patch_changes(job: JobRow, body: dict[str, Any], *, now: float, tz: tzinfo) -> dict[str, Any]:
    """The column changes of a ``PATCH /api/jobs/{id}`` body (allow-listed keys only)."""
    fields = {key: value for key, value in body.items() if key in PATCHABLE}
    if not fields:
        raise JobInputError("No valid fields to update")
    changes: dict[str, Any] = {}
    if "name" in fields:
        changes["name"] = _name(fields["name"])
    if "prompt" in fields:
        changes["prompt"] = _prompt(fields["prompt"])
    if "deliver" in fields:
        changes["deliver"] = _deliver(fields["deliver"])
    if "skills" in fields or "skill" in fields:
        changes["skills"] = _skills(fields.get("skills"), fields.get("skill"))
    if "enabled" in fields and not isinstance(fields["enabled"], bool):
        raise JobInputError("Enabled must be true or false")
    schedule = None
    if "schedule" in fields:
        schedule = _schedule(_schedule_text(fields["schedule"]), now, tz)
        changes["schedule"] = schedule.to_stored()
    times = job.repeat_times
    if "repeat" in fields:
        times = changes["repeat_times"] = _repeat(fields["repeat"])
    enable = fields.get("enabled", job.enabled)
    if not enable:
        if job.enabled:
            changes.update(pause_changes(job, now))
    elif _exhausted(job, times) and "enabled" not in fields:
        changes.update(enabled=False, state=COMPLETED, next_run_at=None)
    elif not job.enabled or schedule is not None:
        updated = dataclasses.replace(job, repeat_times=times)
        changes.update(resume_changes(updated, now, tz, schedule=schedule))
    return changes


# -- rendering ---------------------------------------------------------------------------------


def _iso(moment: float | None, tz: tzinfo) -> str | None:
    return None if moment is None else datetime.fromtimestamp(moment, tz).isoformat()


def fire_json(fire: JobRunRow, tz: tzinfo) -> dict[str, Any]:
    return {
        "run_id": fire.run_id,
        "trigger": fire.trigger,
        "tick": _iso(fire.tick, tz),
        "fired_at": _iso(fire.fired_at, tz),
        "status": fire.status,
        "output": fire.output,
        "error": fire.error,
        "finished_at": _iso(fire.finished_at, tz),
    }


def job_json(job: JobRow, tz: tzinfo, runs: list[JobRunRow] | None = None) -> dict[str, Any]:
    """Upstream's job object, plus ``session_id``, ``last_run`` and (one job) ``runs``.
    Upstream's fields for features not offered here (script, workdir, per-job model…) are
    present with their "not set" values."""
    schedule = Schedule.from_stored(job.schedule)
    body: dict[str, Any] = {
        "id": job.id,
        "name": job.name,
        "prompt": job.prompt,
        "skills": list(job.skills),
        "skill": job.skills[0] if job.skills else None,
        "schedule": schedule.to_json(tz),
        "schedule_display": schedule.display,
        "repeat": {"times": job.repeat_times, "completed": job.repeat_completed},
        "enabled": job.enabled,
        "state": job.state,
        "paused_at": _iso(job.paused_at, tz),
        "paused_reason": job.paused_reason,
        "created_at": _iso(job.created_at, tz),
        "next_run_at": _iso(job.next_run_at, tz),
        "last_run_at": _iso(job.last_run_at, tz),
        "last_status": job.last_status,
        "last_error": job.last_error,
        "last_delivery_error": None,
        "deliver": job.deliver,
        "origin": job.origin,
        "model": None,
        "provider": None,
        "base_url": None,
        "script": None,
        "no_agent": False,
        "context_from": None,
        "enabled_toolsets": None,
        "workdir": None,
        "session_id": job.session_id,
        "last_run": fire_json(job.last_run, tz) if job.last_run else None,
    }
    if runs is not None:
        body["runs"] = [fire_json(run, tz) for run in runs]
    return body
