"""What ``hermes-queue status`` shows: one read (the ``hermes.queue`` snapshot, per-minute
counters, scheduled jobs) and its rendering, kept from the reading (``cli/ops.py``) so a watch
redraws the last good read under a stale line when Redis is gone."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from hermes_queue.cli.formatting import age, clock, table
from hermes_queue.cli.jobs import JobsView, render_jobs
from hermes_queue.cli.tenant_table import render_tenants
from hermes_queue.config import Settings
from hermes_queue.logs import mask_url
from hermes_queue.queueview.snapshot import STATS_FIELDS

# Per-worker rows shown by `status`; a fleet of hundreds would push the queue off the screen.
MAX_WORKER_ROWS = 20
# Failures listed under the count by `status` (its --json has up to RECENT_FAILURES).
MAX_FAILURE_ROWS = 5


@dataclass(frozen=True)
class StatusView:
    """One read for ``status``: the ``hermes.queue`` snapshot plus per-minute counters.

    The snapshot only carries the last few minutes as one total; operators watching a
    deployment recover want the trend, so the table also shows each minute's bucket.
    """

    queue: dict[str, Any]
    minutes: list[tuple[int, dict[str, int]]]
    # Scheduled jobs, from the session store (cli/jobs.py).
    jobs: JobsView | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``hermes.queue`` object, plus ``jobs`` when they were read."""
        if self.jobs is None:
            return self.queue
        return {**self.queue, "jobs": self.jobs.to_json()}


def render_status(
    view: StatusView, settings: Settings, error: Exception | None = None, interval: float = 0
) -> RenderableType:
    """The status table; with ``error``, the last good read under a line saying it is stale."""
    q = view.queue
    workers, tp = q["workers"], q["throughput"]
    header = Text.assemble(
        ("hermes-queue ", "bold"),
        f"namespace {settings.redis.namespace} · {mask_url(settings.redis.url)} · {clock(q['at'])}",
    )
    # Queue and throughput side by side: a watch must fit a 24-line terminal.
    top = Table.grid(padding=(0, 2))
    top.add_row(_queue_table(q), _throughput_table(view.minutes, tp))
    parts: list[RenderableType] = [header, top, _failures_line(tp)]
    tenants = render_tenants(q)
    if tenants is not None:
        parts.append(tenants)
    if q.get("recent_failures"):
        parts.append(render_failures(q["recent_failures"]))
    shortfall = workers_shortfall(workers)
    if shortfall:
        parts.append(Text(shortfall, style="bold red"))
    parts += _fleet(workers)
    if view.jobs is not None:
        parts.append(render_jobs(view.jobs))
    if error is not None:
        stale = f"{outage_line(error, interval)}; figures above are from {clock(q['at'])}"
        parts.append(Text(stale, style="bold red"))
    return Group(*parts)


def _queue_table(q: dict[str, Any]) -> Table:
    """Depth by state and the oldest ready run's wait."""
    depth = q["depth"]
    queue = table("state", "runs>", title="Queue")
    for state in ("ready", "deferred", "running", "blocked"):
        queue.add_row(state, str(depth[state]))
    queue.add_row("oldest ready", age(q["oldest_ready_age_seconds"]) if depth["ready"] else "-")
    return queue


def _throughput_table(minutes: list[tuple[int, dict[str, int]]], tp: dict[str, Any]) -> Table:
    """Outcomes per minute of the throughput window, and their total (failures in red)."""
    throughput = table("minute", *(f"{f}>" for f in STATS_FIELDS), title="Throughput per minute")
    for m, counts in minutes:
        cells = [
            Text(str(n), style="red" if f == "failed" and n else "") for f, n in counts.items()
        ]
        throughput.add_row(datetime.fromtimestamp(m * 60).strftime("%H:%M"), *cells)
    throughput.add_row("total", *(str(tp[f]) for f in STATS_FIELDS), style="bold")
    return throughput


def _failures_line(tp: dict[str, Any]) -> Text:
    return Text(
        f"recent failures: {tp['failed']} failed, {tp['cancelled']} cancelled in the last "
        f"{age(tp['window_seconds'])} · drain {tp['claims_per_second']:.2f} claims/s",
        style="red" if tp["failed"] else "",
    )


def _fleet(workers: dict[str, Any]) -> list[RenderableType]:
    """The workers' summary line and one row per live worker (the first MAX_WORKER_ROWS)."""
    summary = Text(
        f"Workers: {workers['count']} live · {workers['slots']} slots · {workers['busy']} busy"
        f" · {workers['free_slots']} free · desired {workers['desired']}",
        style="italic",
    )
    fleet = table("worker", "slots>", "busy>", "last beat>", "metrics port>")
    for w in workers["data"][:MAX_WORKER_ROWS]:
        fleet.add_row(
            Text(w["id"]),  # a worker id (host:pid:…) is data, not markup or emoji codes
            str(w["slots"]),
            str(w["busy"]),
            age(w["seen_seconds_ago"]),
            str(w.get("metrics_port") or "-"),
        )
    if workers["count"] > MAX_WORKER_ROWS:
        fleet.add_row(f"… {workers['count'] - MAX_WORKER_ROWS} more", "", "", "", "")
    if not workers["count"]:
        no_worker = Text("no live worker: nothing is being run", style="bold red")
        fleet.add_row(no_worker, "", "", "", "")
    return [summary, fleet]


def workers_shortfall(workers: dict[str, Any]) -> str | None:
    """The banner when fewer workers live than the queue needs (as the dashboard's)."""
    live, desired = workers["count"], workers["desired"]
    if live >= desired:
        return None
    return (
        f"fewer live workers than desired: {live} live, {desired} desired "
        "(scale the workers up, or find out why they are not starting)"
    )


def render_failures(failures: dict[str, Any]) -> RenderableType:
    """The failures counted above, listed (newest first, full run ids)."""
    listed = failures["data"][:MAX_FAILURE_ROWS]
    shown = Table(box=None, padding=(0, 2), show_header=False)
    shown.add_column(no_wrap=True, min_width=max((len(f["run_id"]) for f in listed), default=0))
    shown.add_column(no_wrap=True)
    shown.add_column(overflow="fold")
    for failure in listed:
        why = failure["error"] + (f" ({failure['reason']})" if failure["reason"] else "")
        shown.add_row(Text(failure["run_id"]), clock(failure["failed_at"]), Text(why))
    more = failures["total"] - len(listed)
    if more > 0:
        shown.add_row(f"… {more} more (hermes-queue status --json lists up to 20)", "", "")
    return shown


def outage_line(error: Exception, interval: float) -> str:
    return f"Redis unreachable ({type(error).__name__}), retrying every {interval:g}s"
