"""Operator commands ``status`` and ``runs``: the reading behind ``cli/commands.py`` (what
``status`` shows: ``cli/status_view.py``; how cells look: ``cli/formatting.py``).

Operators run these next to a deployment with the same ``HERMES_QUEUE_*`` environment, so they
read Redis and the session store directly instead of going through an API replica: the CLI
must still answer when every replica is down, which is when it is most needed. Queue figures
come from ``queueview.snapshot`` (the same object ``GET /v1/queue`` serves), so the CLI, the
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
from typing import TypeVar

import click
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rich.console import Console
from rich.live import Live

from hermes_queue.cli.deployment import Deployment
from hermes_queue.cli.failures import Failure
from hermes_queue.cli.jobs import job_store, read_jobs
from hermes_queue.cli.status_view import StatusView, outage_line, render_status
from hermes_queue.cli.tenant_table import tenant_view
from hermes_queue.config import Settings
from hermes_queue.logs import mask_url
from hermes_queue.queueview.figures import QueueSnapshot
from hermes_queue.queueview.lists import RECENT_FAILURES
from hermes_queue.queueview.snapshot import STATS_FIELDS, STATS_MINUTES, snapshot
from hermes_queue.redisio.connect import close, connect
from hermes_queue.redisio.health import describe

T = TypeVar("T")

# Bound on one CLI read (snapshot, run lookup): above redisio.connect's own socket timeouts, so
# those fire first with a precise error, but a hang in between still ends.
READ_TIMEOUT_SECONDS = 10.0
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


# -- status ------------------------------------------------------------------------------------


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
                    click.echo(f"error: {outage_line(error, interval)}", err=True)
                else:
                    click.echo(json.dumps(view.to_json()))  # one line per read: NDJSON
                if iterations and n >= iterations:
                    return
                await asyncio.sleep(interval)
                try:
                    view, error = await read(), None
                except (*UNREACHABLE, RedisError) as exc:
                    error = exc


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
