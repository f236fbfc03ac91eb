"""Process entry points: the API server, the worker, and both together in dev mode."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from hermes_queue.api.app import create_app
from hermes_queue.api.server import api_runner
from hermes_queue.api.state import STATE, DrainState
from hermes_queue.config import ApiSettings, ConfigError, Settings
from hermes_queue.keyguard import GENERATE_HINT, OPEN_WARNING, key_weakness
from hermes_queue.redisio.addresses import is_loopback
from hermes_queue.redisio.embedded import EmbeddedRedis
from hermes_queue.workers.worker import build_worker

if TYPE_CHECKING:
    from hermes_queue.tracing.spans import Tracing

log = logging.getLogger(__name__)


def check_bind_safety(settings: ApiSettings) -> None:
    """Refuse to expose the API beyond this machine without a strong key (upstream-api.md §1.1,
    stricter: ``keyguard.key_weakness``). On loopback an API without a key stays open for
    development, announced by one loud warning (and on ``/health/detailed``)."""
    if is_loopback(settings.host):
        if not settings.api_key:
            log.warning("%s\n%s\n%s", "!" * 78, OPEN_WARNING, "!" * 78)
        return
    weakness = key_weakness(settings.api_key)
    if weakness is not None:
        raise ConfigError(
            f"refusing to listen on {settings.host}: the API key (HERMES_QUEUE_API_KEY) "
            f"{weakness}; {GENERATE_HINT}"
        )


def _stop_on_signals() -> asyncio.Event:
    """Install SIGINT/SIGTERM handlers now (before announcing readiness) and return the event
    they set, so a signal that arrives right after start-up still stops us cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def drain(state: DrainState, stop: asyncio.Event, grace_seconds: float) -> None:
    """Refuse new agent turns (503 gateway_draining) for ``grace_seconds`` before the listener
    closes, so a load balancer still routing here sends the client's retry to another replica
    instead of a refused connection, while reads and open SSE streams finish undisturbed. A
    second signal ends the grace at once."""
    state.draining = True
    if grace_seconds <= 0:
        return
    log.info("draining: new runs refused for %.1f s before the listener closes", grace_seconds)
    stop.clear()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), grace_seconds)


async def serve_api(
    settings: Settings, tracing: Tracing | None = None, *, announce: bool = True
) -> None:
    check_bind_safety(settings.api)
    stop = _stop_on_signals()
    app = create_app(settings, tracing)
    runner = api_runner(app, settings.api)
    await runner.setup()
    drain_state = app[STATE].drain
    site = web.TCPSite(runner, settings.api.host, settings.api.port, shutdown_timeout=5.0)
    await site.start()
    if announce:
        log.info("API listening on http://%s:%d", settings.api.host, settings.api.port)
    try:
        await stop.wait()
        await drain(drain_state, stop, settings.api.drain_grace_seconds)
    finally:
        await runner.cleanup()


async def serve_worker(settings: Settings, tracing: Tracing | None = None) -> None:
    """Run until SIGTERM/SIGINT: stop taking jobs, drain for drain_seconds, hand back the rest."""
    worker = build_worker(settings, handle_signals=True, tracing=tracing)
    try:
        await worker.start()
    except asyncio.CancelledError:
        pass
    finally:
        await worker.close()


# What ``hermes-queue dev`` lets webhooks reach unless webhook_allowed_hosts says otherwise.
DEV_WEBHOOK_HOSTS = ("localhost", "127.0.0.1", "::1")


async def serve_dev(
    settings: Settings, redis_url_given: bool, tracing: Tracing | None = None
) -> None:
    """API and worker in one process, with a private Redis unless one was configured."""
    embedded = None if redis_url_given else EmbeddedRedis.start()
    if embedded is not None:
        settings = settings.replace(redis_url=embedded.url)
    if not settings.api.api_key:
        settings = settings.replace(api_key="hq-" + secrets.token_urlsafe(24))
    if not settings.webhooks.allowed_hosts:
        # A webhook receiver on this machine is what one tries locally.
        settings = settings.replace(webhook_allowed_hosts=DEV_WEBHOOK_HOSTS)
    if settings.store.url.startswith("sqlite:///") and not settings.store.url.startswith(
        "sqlite:////"
    ):
        Path(settings.store.url.removeprefix("sqlite:///")).parent.mkdir(
            parents=True, exist_ok=True
        )
    check_bind_safety(settings.api)
    stop = _stop_on_signals()
    worker = build_worker(settings, handle_signals=False, tracing=tracing)
    runner = api_runner(create_app(settings, tracing), settings.api)
    await runner.setup()
    await web.TCPSite(runner, settings.api.host, settings.api.port).start()
    base = f"http://{settings.api.host}:{settings.api.port}"
    print(f"hermes-queue dev is up\n  base URL: {base}\n  API key:  {settings.api.api_key}")
    print(f"  redis:    {settings.redis.url}{' (embedded)' if embedded else ''}")
    print(f"  agent:    {settings.agents.backend}")
    print(
        f'  try:      curl -s -H "Authorization: Bearer {settings.api.api_key}" '
        f'-d \'{{"input":"hello"}}\' {base}/v1/runs',
        flush=True,
    )
    worker_task = worker.start()
    try:
        await stop.wait()
    finally:
        worker.stop_taking_jobs()
        worker_task.cancel()
        await asyncio.gather(worker_task, return_exceptions=True)
        await worker.close()
        await runner.cleanup()
        if embedded is not None:
            embedded.stop()
