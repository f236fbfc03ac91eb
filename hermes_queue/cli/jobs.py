"""Scheduled jobs in ``hermes-queue status``: read from the session store, shown as a table.

The queue figures come from Redis; jobs live in the SQL store, so ``status`` reads both. A
store it cannot read is one line under the table, never a failed command: the queue view is
what an operator needs most when things break.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from hermes_queue.config import Settings
from hermes_queue.schedules.firing import job_timezone
from hermes_queue.schedules.parsing import Schedule
from hermes_queue.store import SessionStore, StoreError, create_store
from hermes_queue.store.jobs import JobRow

READ_TIMEOUT_SECONDS = 10.0
MAX_JOB_ROWS = 15


@dataclass(frozen=True)
class JobsView:
    """The jobs (compact rows, soonest next fire first) or why they could not be read."""

    jobs: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> list[dict[str, Any]] | None:
        return None if self.error else self.jobs


@asynccontextmanager
async def job_store(settings: Settings) -> AsyncIterator[SessionStore | None]:
    """The session store for one command (None for a URL that is not a store URL)."""
    try:
        store = create_store(settings.store.url, schema=settings.store.schema or None)
    except ValueError:
        yield None
        return
    try:
        yield store
    finally:
        await store.close()


def _row(job: JobRow, settings: Settings) -> dict[str, Any]:
    tz = job_timezone(settings.schedules)

    def iso(moment: float | None) -> str | None:
        return None if moment is None else datetime.fromtimestamp(moment, tz).isoformat()

    return {
        "id": job.id,
        "name": job.name,
        "schedule": Schedule.from_stored(job.schedule).display,
        "state": job.state,
        "enabled": job.enabled,
        "next_run_at": iso(job.next_run_at),
        "next_run_epoch": job.next_run_at,
        "last_run_at": iso(job.last_run_at),
        "last_status": job.last_status,
        "repeat": {"times": job.repeat_times, "completed": job.repeat_completed},
    }


async def read_jobs(store: SessionStore | None, settings: Settings) -> JobsView:
    if store is None:
        return JobsView(error="store_url is not a store URL")
    try:
        async with asyncio.timeout(READ_TIMEOUT_SECONDS):
            rows = await store.list_jobs(include_disabled=True)
    except (StoreError, TimeoutError, OSError) as exc:
        return JobsView(error=f"session store unreadable ({type(exc).__name__})")
    rows.sort(key=lambda j: (j.next_run_at is None, j.next_run_at or 0.0, j.created_at))
    return JobsView([_row(job, settings) for job in rows])


def _until(moment: float, now: float) -> str:
    seconds = int(moment - now)
    if seconds <= 0:
        return "due"
    if seconds < 60:
        return f"in {seconds}s"
    if seconds < 3600:
        return f"in {seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86_400:
        return f"in {seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"in {seconds // 86_400}d{seconds % 86_400 // 3600:02d}h"


def _when(iso: str, now: float) -> str:
    """``14:05:02`` within a day (the time left beside it says which day), else ``2026-03-03
    08:00``: a fire an hour away is as wide at 23:30 as at noon, so the table's other columns
    keep their width in an 80-column terminal across midnight."""
    moment = datetime.fromisoformat(iso)
    if abs(moment.timestamp() - now) < 86_400:
        return moment.strftime("%H:%M:%S")
    return moment.strftime("%Y-%m-%d %H:%M")


def render_jobs(view: JobsView, now: float | None = None) -> RenderableType:
    now = time.time() if now is None else now
    if view.error:
        return Text(f"Scheduled jobs: {view.error}", style="yellow")
    scheduled = sum(1 for job in view.jobs if job["enabled"])
    title = f"Scheduled jobs: {scheduled} scheduled, {len(view.jobs) - scheduled} paused or done"
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    ids = [job["id"] for job in view.jobs[:MAX_JOB_ROWS]]
    # The id is what /api/jobs takes: first, and never cut; the name gives way instead.
    table.add_column("id", no_wrap=True, min_width=max(map(len, ids), default=2))
    names = [job["name"] for job in view.jobs[:MAX_JOB_ROWS]]
    table.add_column("job", no_wrap=True, min_width=min(max(map(len, names), default=3), 10))
    for column in ("schedule", "state"):
        table.add_column(column, no_wrap=True, overflow="ellipsis")
    table.add_column("next fire", no_wrap=True)
    table.add_column("last run", no_wrap=True)
    for job in view.jobs[:MAX_JOB_ROWS]:
        epoch = job["next_run_epoch"]
        next_fire = (
            "-" if epoch is None else f"{_when(job['next_run_at'], now)} ({_until(epoch, now)})"
        )
        last = job["last_status"] or ("pending" if job["last_run_at"] else "-")
        cells = (job["id"], job["name"], job["schedule"], job["state"], next_fire, last)
        table.add_row(*map(Text, cells))  # data, never markup or emoji codes
    if len(view.jobs) > MAX_JOB_ROWS:
        table.add_row(f"… {len(view.jobs) - MAX_JOB_ROWS} more", "", "", "", "", "")
    if not view.jobs:
        return Group(Text(title.split(":")[0] + ": none", style="italic"))
    return table
