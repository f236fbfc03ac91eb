"""``hermes-queue check``: a container probe for this process's dependencies.

Orchestrators run it every few seconds (Kubernetes exec probes, compose healthchecks), so it
must answer fast and never hang: each dependency is checked concurrently under its own
timeout, every failure is one line naming the dependency and the exception class, and the exit
code alone carries the verdict. Passwords in URLs are masked: probe output lands in event logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import click

from hermes_queue.config import Settings
from hermes_queue.redisio.connect import close, connect
from hermes_queue.store import create_store
from hermes_queue.store.migrations import LATEST_VERSION

# A probe answers within this per check; container runtimes kill slower probes anyway.
CHECK_TIMEOUT_SECONDS = 3.0


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***``: error lines end up in CI logs and
    tickets, and a Redis or PostgreSQL URL often carries its credentials."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        userinfo, _, host = parts.netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
    except ValueError:
        return "<unparseable URL>"


class CheckFailed(Exception):
    """A dependency answered but is not usable; the message is safe to print as is."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str


async def _guarded(name: str, target: str, probe: Callable[[], Awaitable[str]]) -> CheckResult:
    """One check under its own timeout; any failure is a failed check, never an exception,
    so the other checks still report and the probe always prints a line per dependency."""
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
            return CheckResult(name, True, f"{target} ({await probe()})")
    except CheckFailed as exc:
        return CheckResult(name, False, f"{target} {exc}")
    except Exception as exc:
        # The class name only: driver messages may quote hosts, users or passwords.
        reason = "timeout" if isinstance(exc, TimeoutError) else type(exc).__name__
        return CheckResult(name, False, f"{target} is unreachable ({reason})")


def warm_up_check(settings: Settings) -> CheckResult:
    """A worker is ready once its backend warmed up (``workers/warmup.py``): a worker process
    of this namespace on this host has said so; a failed warm-up is a failed check."""
    from hermes_queue.workers.warmup import probe

    report = probe(settings.redis.namespace)
    return CheckResult("warm_up", report.ok, report.detail)


async def run_checks(settings: Settings) -> list[CheckResult]:
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
        try:
            store = create_store(settings.store.url, schema=settings.store.schema or None)
        except ValueError:
            # Not the message: for a URL without a scheme it quotes the URL, password included.
            raise CheckFailed("is not a store URL (use sqlite:///path or postgresql://…)") from None
        try:
            await store.ping()
            version = await store.schema_version()
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
        return f"schema {version}"

    return list(
        await asyncio.gather(
            _guarded("redis", mask_url(settings.redis.url), redis_probe),
            _guarded("session_store", mask_url(settings.store.url), store_probe),
        )
    )


def check(settings: Settings, role: str) -> int:
    """``hermes-queue check``: 0 when this process's dependencies answer, 1 otherwise.

    API and worker need the same two (Redis, the session store); a worker is also ready only
    once the worker process on this host warmed up. Other workers are deliberately not
    required: a worker's probe must not depend on other workers, and an API replica is ready
    before the first worker starts.
    """
    results = asyncio.run(run_checks(settings))
    if role == "worker":
        results.append(warm_up_check(settings))
    for r in results:
        click.echo(f"{'ok' if r.ok else 'FAIL':<5} {r.name:<14} {r.detail}")
    healthy = all(r.ok for r in results)
    click.echo(f"{role}: {'healthy' if healthy else 'UNHEALTHY'}")
    return 0 if healthy else 1
