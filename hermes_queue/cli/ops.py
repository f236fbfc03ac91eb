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
import time
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

from hermes_queue.cli.failures import Failure
from hermes_queue.cli.jobs import JobsView, job_store, read_jobs, render_jobs
from hermes_queue.config import Settings
from hermes_queue.logs import mask_url
from hermes_queue.queue_state import STATS_FIELDS, STATS_MINUTES, QueueSnapshot, snapshot
from hermes_queue.redisio.connect import close, connect
from hermes_queue.runs.model import RunRecord, RunStatus
from hermes_queue.runs.repository import RunRepository

T = TypeVar("T")

# Bound on one CLI read (snapshot, run lookup): above redisio.connect's own socket timeouts, so
# those fire first with a precise error, but a hang in between still ends.
READ_TIMEOUT_SECONDS = 10.0
# Per-worker rows shown by `status`; a fleet of hundreds would push the queue off the screen.
MAX_WORKER_ROWS = 20
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, TimeoutError, OSError)


class OpsError(Failure):
    """One ``error: …`` line on stderr and exit 1, as ``tail`` prints its errors."""


@asynccontextmanager
async def redis_session(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    """A client for one command, whose Redis failures become one clear error line."""
    where = mask_url(settings.redis.url)
    try:
        client = connect(settings.redis)
    except ValueError as exc:
        raise OpsError(f"invalid redis_url {where}: {exc}") from None
    try:
        yield client
    except UNREACHABLE as exc:
        raise OpsError(f"Redis at {where} is unreachable ({type(exc).__name__})") from None
    except RedisError as exc:
        # The class only: a reply's text can quote keys or data.
        raise OpsError(f"Redis at {where} failed ({type(exc).__name__})") from None
    finally:
        await close(client)


async def _bounded(awaitable: Awaitable[T]) -> T:
    async with asyncio.timeout(READ_TIMEOUT_SECONDS):
        return await awaitable


def _read(settings: Settings, read: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
    """One bounded read with a client of its own: what every one-shot command does."""

    async def go() -> T:
        async with redis_session(settings) as redis:
            return await _bounded(read(redis))

    return asyncio.run(go())


def _table(*columns: str, title: str | None = None) -> Table:
    """A compact table (no outer border, so a watch fits 24 lines); ``name>`` right-aligns."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for c in columns:
        table.add_column(c.rstrip(">"), justify="right" if c.endswith(">") else "left")
    return table


def _age(seconds: float) -> str:
    """Compact durations for narrow terminals: 0.4s, 12s, 3m05s, 27h07m."""
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    return f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"


def _clock(ts: float) -> str:
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


def _snapshot(
    redis: aioredis.Redis, settings: Settings, limit: int = 0, offset: int = 0
) -> Awaitable[QueueSnapshot]:
    """The snapshot ``GET /v1/queue`` serves, counted as the API counts it."""
    return snapshot(
        redis,
        settings.redis.keys,
        settings.runs.lease_seconds,
        default_slots=settings.worker.concurrency,
        limit=limit,
        offset=offset,
    )


def _runs(redis: aioredis.Redis, settings: Settings) -> RunRepository:
    return RunRepository(redis, settings.redis.keys, settings.runs)


async def read_status(redis: aioredis.Redis, settings: Settings) -> StatusView:
    snap = await _snapshot(redis, settings)
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
    depth, workers, tp = q["depth"], q["workers"], q["throughput"]
    header = Text.assemble(
        ("hermes-queue ", "bold"),
        f"namespace {settings.redis.namespace} · {mask_url(settings.redis.url)} · "
        f"{_clock(q['at'])}",
    )

    queue = _table("state", "runs>", title="Queue")
    for state in ("ready", "deferred", "running", "blocked"):
        queue.add_row(state, str(depth[state]))
    queue.add_row("oldest ready", _age(q["oldest_ready_age_seconds"]) if depth["ready"] else "-")

    fleet_summary = Text(
        f"Workers: {workers['count']} live · {workers['slots']} slots · {workers['busy']} busy"
        f" · {workers['free_slots']} free · desired {workers['desired']}",
        style="italic",
    )
    fleet = _table("worker", "slots>", "busy>", "last beat>", "metrics port>")
    for w in workers["data"][:MAX_WORKER_ROWS]:
        fleet.add_row(
            w["id"],
            str(w["slots"]),
            str(w["busy"]),
            _age(w["seen_seconds_ago"]),
            str(w.get("metrics_port") or "-"),
        )
    if workers["count"] > MAX_WORKER_ROWS:
        fleet.add_row(f"… {workers['count'] - MAX_WORKER_ROWS} more", "", "", "", "")
    if not workers["count"]:
        no_worker = Text("no live worker: nothing is being run", style="bold red")
        fleet.add_row(no_worker, "", "", "", "")

    window = tp["window_seconds"]
    throughput = _table("minute", *(f"{f}>" for f in STATS_FIELDS), title="Throughput per minute")
    for m, counts in view.minutes:
        cells = [
            Text(str(n), style="red" if f == "failed" and n else "") for f, n in counts.items()
        ]
        throughput.add_row(datetime.fromtimestamp(m * 60).strftime("%H:%M"), *cells)
    throughput.add_row("total", *(str(tp[f]) for f in STATS_FIELDS), style="bold")
    failures = Text(
        f"recent failures: {tp['failed']} failed, {tp['cancelled']} cancelled in the last "
        f"{_age(window)} · drain {tp['claims_per_second']:.2f} claims/s",
        style="red" if tp["failed"] else "",
    )
    # Queue and throughput side by side: a watch must fit a 24-line terminal.
    top = Table.grid(padding=(0, 2))
    top.add_row(queue, throughput)
    parts: list[RenderableType] = [header, top, failures, fleet_summary, fleet]
    if view.jobs is not None:
        parts.append(render_jobs(view.jobs))
    if error is not None:
        stale = f"{_outage(error, interval)}; figures above are from {_clock(q['at'])}"
        parts.append(Text(stale, style="bold red"))
    return Group(*parts)


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


def _read_view(settings: Settings) -> StatusView:
    """Queue state from Redis and the jobs from the session store, for one ``status``."""

    async def go() -> StatusView:
        async with redis_session(settings) as redis, job_store(settings) as store:
            view = await _bounded(read_status(redis, settings))
            return dataclasses.replace(view, jobs=await read_jobs(store, settings))

    return asyncio.run(go())


# -- runs --------------------------------------------------------------------------------------


def runs_list(settings: Settings, *, limit: int, offset: int, as_json: bool) -> None:
    """In-flight (leased) runs, one page, soonest lease deadline first as ``/v1/queue``."""
    snap = _read(settings, lambda r: _snapshot(r, settings, limit, offset))
    page: dict[str, Any] = snap.to_json()["in_flight"]
    if as_json:
        click.echo(json.dumps(page, indent=2))
        return
    table = _table(
        "run",
        "session",
        "status",
        "worker",
        "attempt>",
        "age>",
        title=f"In-flight: {page['total']}",
    )
    for run in page["data"]:
        cells = [run[k] or "-" for k in ("run_id", "session_id", "status", "worker")]
        table.add_row(*cells, str(run["attempt"]), _age(run["age_seconds"]))
    out = Console()
    out.print(table)
    shown = len(page["data"])
    if shown and page["total"] > offset + shown:
        out.print(f"showing {offset + 1}–{offset + shown}; next page: --offset {offset + shown}")


def _not_found(run_id: str) -> OpsError:
    return OpsError(f"run {run_id} not found (unknown, or ended more than retention_seconds ago)")


def run_details(record: RunRecord) -> dict[str, Any]:
    """The ``hermes.run`` object plus what an operator debugging a run needs: which worker
    holds (or held) it, and why it failed, which ``hermes.run`` leaves out unless failed."""
    return {**record.to_status(), "worker": record.worker or None, "reason": record.reason}


def runs_show(settings: Settings, run_id: str, *, as_json: bool) -> None:
    record = _read(settings, lambda r: _runs(r, settings).get(run_id))
    if record is None:
        raise _not_found(run_id)
    details = run_details(record)
    if as_json:
        click.echo(json.dumps(details, indent=2, ensure_ascii=False))
        return
    shown = {k: str(details.get(k) or "-") for k in ("run_id", "status", "session_id", "model")}
    shown |= {k: str(details.get(k) or "-") for k in ("attempt", "worker", "last_event")}
    for k in ("created_at", "updated_at"):
        shown[k] = f"{_clock(details[k])} ({_age(max(0.0, time.time() - details[k]))} ago)"
    shown |= {k: str(details[k]) for k in ("reason", "error") if details.get(k)}
    if "output" in details:
        # Message bodies stay off shared terminals and screenshots; --json has them.
        shown["output"] = f"{len(details['output'])} characters (--json shows it)"
        shown["usage"] = json.dumps(details.get("usage") or {})
    grid = Table.grid(padding=(0, 2))
    for name, value in shown.items():
        grid.add_row(Text(name, style="bold"), value)
    Console().print(grid)


def runs_stop(settings: Settings, run_id: str) -> None:
    """Queued runs end ``cancelled`` at once; running ones go ``stopping`` until their worker
    ends the turn; finished ones are left alone (stop is idempotent, as the API's)."""
    outcome = _read(settings, lambda r: _runs(r, settings).request_stop(run_id))
    if not outcome.found:
        raise _not_found(run_id)
    now = outcome.status
    if now == RunStatus.STOPPING:
        click.echo(f"{run_id}: stopping (its worker ends the turn and marks it cancelled)")
    elif now in (RunStatus.COMPLETED, RunStatus.FAILED):
        click.echo(f"{run_id}: already {now}, nothing to stop")
    else:
        click.echo(f"{run_id}: {now}")
