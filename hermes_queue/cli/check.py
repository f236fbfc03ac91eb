"""``hermes-queue check``: a container probe for this process's dependencies.

Orchestrators run it every few seconds (Kubernetes exec probes, compose healthchecks), so it
must answer fast and never hang: each dependency is checked concurrently under its own
timeout, every failure is one line naming the dependency and the exception class, and the exit
code alone carries the verdict. Passwords in URLs are masked: probe output lands in event logs.

It also answers an operator's "which deployment is this?": Redis is named as not reachable,
reachable but not Redis, or refusing the credentials; the session store by where it is (a
SQLite file's path, a PostgreSQL host and database) and how many sessions and messages it
holds, so an empty store behind a mistyped path shows. It never creates a store.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import click

from hermes_queue.cli.deployment import SOURCE as DEV_SOURCE
from hermes_queue.cli.preflight import sqlite_directory
from hermes_queue.config import Settings
from hermes_queue.config.urls import sqlite_path
from hermes_queue.logs import mask_url
from hermes_queue.redisio.connect import close, connect
from hermes_queue.redisio.health import describe
from hermes_queue.store import create_store, store_location
from hermes_queue.store.migrations import LATEST_VERSION

# A probe answers within this per check; container runtimes kill slower probes anyway.
CHECK_TIMEOUT_SECONDS = 3.0


class CheckFailed(Exception):
    """A dependency answered but is not usable; the message is safe to print as is."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str


def _unreachable(exc: BaseException) -> str:
    # The class name only: driver messages may quote hosts, users or passwords.
    return (
        f"is not reachable ({'timeout' if isinstance(exc, TimeoutError) else type(exc).__name__})"
    )


def _redis_failure(exc: BaseException) -> str:
    """Not reachable, or reachable but not Redis, or refusing the credentials: each has its
    own fix (``redisio/health.py``)."""
    return _unreachable(exc) if isinstance(exc, TimeoutError) else describe(exc)


async def _guarded(
    name: str,
    target: str,
    probe: Callable[[], Awaitable[str]],
    failure: Callable[[BaseException], str] = _unreachable,
) -> CheckResult:
    """One check under its own timeout; any failure is a failed check, never an exception,
    so the other checks still report and the probe always prints a line per dependency."""
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
            return CheckResult(name, True, f"{target} ({await probe()})")
    except CheckFailed as exc:
        return CheckResult(name, False, f"{target} {exc}")
    except Exception as exc:
        return CheckResult(name, False, f"{target} {failure(exc)}")


def warm_up_check(settings: Settings) -> CheckResult:
    """A worker is ready once its backend warmed up (``workers/warmup.py``): a worker process
    of this namespace on this host has said so; a failed warm-up is a failed check."""
    from hermes_queue.workers.warmup import probe

    report = probe(settings.redis.namespace)
    return CheckResult("warm_up", report.ok, report.detail)


async def run_checks(settings: Settings, source: str = "") -> list[CheckResult]:
    """Redis and the session store, concurrently; ``source`` annotates Redis's line when its
    URL came from a running ``hermes-queue dev`` (``cli/deployment.py``)."""

    async def redis_probe() -> str:
        # An operator's command answers at once: no waiting out a switchover.
        client = connect(dataclasses.replace(settings.redis, switchover_wait_seconds=0))
        try:
            started = time.perf_counter()
            await client.ping()
            return f"{(time.perf_counter() - started) * 1000:.1f} ms"
        finally:
            await close(client)

    async def store_probe() -> str:
        missing = _missing_sqlite_file(settings)
        if missing:
            raise CheckFailed(missing)
        # Read-only: a probe never creates a store (nor a SQLite file's -wal, -shm).
        store = create_store(settings.store.url, schema=settings.store.schema or None, create=False)
        try:
            await store.ping()
            version = await store.schema_version()
            counts = await store.row_counts() if version else {"sessions": 0, "messages": 0}
        finally:
            # Bounded too: a pool draining a stuck connection must not outlive the probe.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1):
                    await store.close()
        if version < LATEST_VERSION:
            # Reachable but unmigrated still fails every session request.
            raise CheckFailed(
                f"has schema {version} < {LATEST_VERSION}: run `hermes-queue migrate`"
            )
        return f"schema {version}, {counts['sessions']} sessions, {counts['messages']} messages"

    where = store_location(settings.store.url, settings.store.schema)
    redis_target = mask_url(settings.redis.url)
    if source.startswith(DEV_SOURCE):
        redis_target += f" ({source})"
    return list(
        await asyncio.gather(
            _guarded("redis", redis_target, redis_probe, _redis_failure),
            _guarded("session_store", where, store_probe),
        )
    )


def _missing_sqlite_file(settings: Settings) -> str | None:
    """Why a SQLite store is not there, or None (also for PostgreSQL): said plainly, since a
    mistyped path is the usual cause and a new file must not be created by the probe."""
    directory = sqlite_directory(settings.store)
    if directory is None:
        return None
    if not directory.is_dir():
        return f"is in {directory}, a directory that does not exist: check store_url"
    path = sqlite_path(settings.store.url)
    if path is not None and not Path(path).exists():
        return "does not exist yet: run `hermes-queue migrate` (or check store_url)"
    return None


def check(settings: Settings, role: str, source: str = "") -> int:
    """``hermes-queue check``: 0 when this process's dependencies answer, 1 otherwise.

    API and worker need the same two (Redis, the session store); a worker is also ready only
    once the worker process on this host warmed up. Other workers are deliberately not
    required: a worker's probe must not depend on other workers, and an API replica is ready
    before the first worker starts.
    """
    results = asyncio.run(run_checks(settings, source))
    if role == "worker":
        results.append(warm_up_check(settings))
    for r in results:
        click.echo(f"{'ok' if r.ok else 'FAIL':<5} {r.name:<14} {r.detail}")
    healthy = all(r.ok for r in results)
    click.echo(f"{role}: {'healthy' if healthy else 'UNHEALTHY'}")
    return 0 if healthy else 1
