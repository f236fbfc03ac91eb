"""Operator commands ``status`` and ``runs``: the logic and rendering behind ``cli/commands.py``.

Operators run these next to a deployment with the same ``HERMES_QUEUE_*`` environment, so they
read Redis and the session store directly instead of going through an API replica: the CLI
must still answer when every replica is down, which is when it is most needed. Queue figures
come from ``queue_state.snapshot`` (the same object ``GET /v1/queue`` serves), so the CLI, the
dashboard and ``/metrics`` can never disagree.

Every failure becomes one ``error: …`` line and exit code 1 (no traceback) and every network call
is bounded by a timeout: a blackholed Redis must not hang a terminal. ``check`` (the container
probe) lives in ``cli.check`` so a probe run every few seconds does not import ``rich``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import click
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from hermes_queue.cli.deployment import Deployment
from hermes_queue.cli.failures import Failure
from hermes_queue.cli.jobs import JobsView, job_store, read_jobs, render_jobs
from hermes_queue.cli.tenant_table import render_tenants, tenant_view
from hermes_queue.config import Settings
from hermes_queue.logs import mask_url
from hermes_queue.queue_lists import RECENT_FAILURES
from hermes_queue.queue_state import STATS_FIELDS, STATS_MINUTES, QueueSnapshot, snapshot
from hermes_queue.redisio.connect import close, connect
from hermes_queue.redisio.health import describe

T = TypeVar("T")

# Bound on one CLI read (snapshot, run lookup): above redisio.connect's own socket timeouts, so
# those fire first with a precise error, but a hang in between still ends.
READ_TIMEOUT_SECONDS = 10.0
# Per-worker rows shown by `status`; a fleet of hundreds would push the queue off the screen.
MAX_WORKER_ROWS = 20
# Failures listed under the count by `status` (its --json has up to RECENT_FAILURES).
MAX_FAILURE_ROWS = 5
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, TimeoutError, OSError)


class OpsError(Failure):
    """One ``error: …`` line on stderr and exit 1, as ``tail`` prints its errors."""


@asynccontextmanager
async def redis_session(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    """A client for one command, whose Redis failures become one clear error line."""
    where = mask_url(settings.redis.url)
    try:
        # An operator's command answers at once: no waiting out a switchover.
        client = connect(dataclasses.replace(settings.redis, switchover_wait_seconds=0))
    except ValueError as exc:
        raise OpsError(f"invalid redis_url {where}: {exc}") from None
    try:
        yield client
    except (*UNREACHABLE, RedisError) as exc:
        # The state and the class only: a reply's text can quote keys or data.
        raise OpsError(f"Redis at {where} {describe(exc)}") from None
    finally:
        await close(client)


async def _bounded(awaitable: Awaitable[T]) -> T:
    async with asyncio.timeout(READ_TIMEOUT_SECONDS):
        return await awaitable


def read(settings: Settings, reader: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
    """One bounded read with a client of its own: what every one-shot command does."""

    async def go() -> T:
        async with redis_session(settings) as redis:
            return await _bounded(reader(redis))

    return asyncio.run(go())


def table(*columns: str, title: str | None = None) -> Table:
    """A compact table (no outer border, so a watch fits 24 lines); ``name>`` right-aligns."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for c in columns:
        table.add_column(c.rstrip(">"), justify="right" if c.endswith(">") else "left")
    return table


def age(seconds: float) -> str:
    """Compact durations for narrow terminals: 0.4s, 12s, 3m05s, 27h07m."""
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    return f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"


def clock(ts: float) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


# -- status ------------------------------------------------------------------------------------


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


def read_snapshot(
    redis: aioredis.Redis, settings: Settings, limit: int = 0, offset: int = 0, failures: int = 0
) -> Awaitable[QueueSnapshot]:
    """The snapshot ``GET /v1/queue`` serves, counted as the API counts it."""
    return snapshot(
        redis,
        settings.redis.keys,
        settings.runs.lease_seconds,
        default_slots=settings.worker.concurrency,
        limit=limit,
        offset=offset,
        failures=failures,
        tenants=tenant_view(settings),
    )


async def read_status(redis: aioredis.Redis, settings: Settings) -> StatusView:
    snap = await read_snapshot(redis, settings, failures=RECENT_FAILURES)
    keys = settings.redis.keys
    minute = int(snap.at // 60)
    buckets = [minute - i for i in range(STATS_MINUTES)]
    shards = list(keys.shard_ids)  # each minute summed over every shard
    async with redis.pipeline(transaction=False) as pipe:
        for m in buckets:
            for shard in shards:
                pipe.hmget(keys.stats_at(shard, m), list(STATS_FIELDS))
        rows = await pipe.execute()
    minutes = [
        (
            m,
            {
                f: sum(int(row[i] or 0) for row in rows[j * len(shards) : (j + 1) * len(shards)])
                for i, f in enumerate(STATS_FIELDS)
            },
        )
        for j, m in enumerate(buckets)
    ]
    return StatusView(snap.to_json(), minutes)


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
        stale = f"{_outage(error, interval)}; figures above are from {clock(q['at'])}"
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


async def _watch(
    settings: Settings, interval: float, iterations: int | None, as_json: bool, out: Console
) -> None:
    """Refresh until Ctrl-C (or ``iterations`` reads, for tests). A Redis outage after the
    first read is shown and retried rather than ending the watch: that is what one watches."""
    async with redis_session(settings) as redis, job_store(settings) as store:

        async def read() -> StatusView:
            view = await _bounded(read_status(redis, settings))
            return dataclasses.replace(view, jobs=await read_jobs(store, settings))

        with Console(stderr=True).status("reading queue state…"):
            view = await read()
        error: Exception | None = None
        live = None if as_json else Live(console=out, auto_refresh=False)
        with live or contextlib.nullcontext():
            for n in itertools.count(1):
                if live is not None:
                    live.update(render_status(view, settings, error, interval), refresh=True)
                elif error is not None:
                    click.echo(f"error: {_outage(error, interval)}", err=True)
                else:
                    click.echo(json.dumps(view.to_json()))  # one line per read: NDJSON
                if iterations and n >= iterations:
                    return
                await asyncio.sleep(interval)
                try:
                    view, error = await read(), None
                except (*UNREACHABLE, RedisError) as exc:
                    error = exc


def _outage(error: Exception, interval: float) -> str:
    return f"Redis unreachable ({type(error).__name__}), retrying every {interval:g}s"


def status(
    settings: Settings, *, as_json: bool, watch: float | None, iterations: int | None = None
) -> None:
    """``hermes-queue status``: one table, the ``hermes.queue`` JSON, or a live view."""
    out = Console()
    if watch is not None:
        try:
            asyncio.run(_watch(settings, watch, iterations, as_json, out))
        except KeyboardInterrupt:
            pass  # Ctrl-C is how a watch ends: not an error
        return

    if as_json:
        click.echo(json.dumps(_read_view(settings).to_json(), indent=2))
        return
    with Console(stderr=True).status("reading queue state…"):
        view = _read_view(settings)
    out.print(render_status(view, settings))


# "No run here in the last hour": as far back as the per-minute counters go (keys.py: stats).
QUIET_MINUTES = 60


async def _nothing_here(redis: aioredis.Redis, settings: Settings) -> bool:
    """No live worker, nothing queued or running, and no run counted in the last hour: likely
    not the deployment the operator meant (another Redis, or another namespace)."""
    snap = await read_snapshot(redis, settings)
    depth = snap.depth
    if snap.workers or depth.ready or depth.deferred or depth.running or depth.blocked:
        return False
    keys = settings.redis.keys
    minute = int(snap.at // 60)
    async with redis.pipeline(transaction=False) as pipe:
        for m in range(minute - QUIET_MINUTES, minute + 1):
            for shard in keys.shard_ids:
                pipe.hmget(keys.stats_at(shard, m), list(STATS_FIELDS))
        rows = await pipe.execute()
    return not any(value for row in rows for value in row)


def warn_if_nothing_here(deployment: Deployment) -> None:
    """One ``warning: …`` line (stderr) when the deployment looks unused: the usual cause is
    the CLI reading another Redis or namespace than the deployment's."""
    settings = deployment.settings
    try:
        empty = read(settings, lambda r: _nothing_here(r, settings))
    except OpsError:
        return  # the command itself reports an unreachable Redis, in its own words
    if not empty:
        return
    if deployment.default:
        hint = (
            "set HERMES_QUEUE_REDIS_URL (and the deployment's other HERMES_QUEUE_* settings), "
            "or start hermes-queue dev, whose commands find it by themselves"
        )
    else:
        hint = (
            f"check HERMES_QUEUE_REDIS_URL and HERMES_QUEUE_NAMESPACE ({settings.redis.namespace})"
        )
    click.echo(
        f"warning: no live worker and no run here in the last hour: is {deployment.line} the "
        f"deployment you meant? {hint}",
        err=True,
    )


def _read_view(settings: Settings) -> StatusView:
    """Queue state from Redis and the jobs from the session store, for one ``status``."""

    async def go() -> StatusView:
        async with redis_session(settings) as redis, job_store(settings) as store:
            view = await _bounded(read_status(redis, settings))
            return dataclasses.replace(view, jobs=await read_jobs(store, settings))

    return asyncio.run(go())
