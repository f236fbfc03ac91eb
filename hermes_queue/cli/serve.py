"""Process entry points: the API server, the worker, and both together in dev mode."""

from __future__ import annotations

import asyncio
import errno
import logging
import secrets
import shlex
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from hermes_queue.api.app import create_app
from hermes_queue.api.drain import drain_api
from hermes_queue.api.server import api_runner
from hermes_queue.api.state import STATE
from hermes_queue.cli import deployment
from hermes_queue.cli.failures import StartupError
from hermes_queue.config import ApiSettings, ConfigError, Settings
from hermes_queue.config.base import bad_value
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
    # Tenant keys given in clear are judged the same way (a sha256: digest cannot be).
    for key in settings.tenant_keys()[1:]:
        weakness = None if key.clear is None else key_weakness(key.clear)
        if weakness is not None:
            raise ConfigError(
                f"refusing to listen on {settings.host}: a key of tenant {key.tenant!r} "
                f"(HERMES_QUEUE_API_KEYS) {weakness}; {GENERATE_HINT}"
            )


async def listen(site: web.TCPSite, api: ApiSettings, runner: web.BaseRunner) -> None:
    """Start listening; a bind that fails is one line naming the setting to change (the
    runner cleaned up first, so the app's connections close). A port held by another process
    is a runtime failure (exit 1: it may be free on the next start), an address that is not
    this machine's, or a privileged port, a configuration one (exit 2)."""
    where = f"{api.host}:{api.port}"
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(
                f"cannot listen on {where}: the port is already in use by another process; "
                "stop it, or set another port (HERMES_QUEUE_PORT or --port)"
            ) from None
        if exc.errno == errno.EACCES:
            raise bad_value(
                "port", str(api.port), "needs privileges to bind", "a port of 1024 or more"
            ) from None
        if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
            raise bad_value(
                "host", api.host, "is not an address of this machine", "one of its addresses"
            ) from None
        raise StartupError(f"cannot listen on {where}: {exc.strerror or exc}") from None


def _stop_on_signals() -> asyncio.Event:
    """Install SIGINT/SIGTERM handlers now (before announcing readiness) and return the event
    they set, so a signal that arrives right after start-up still stops us cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def serve_api(
    settings: Settings, tracing: Tracing | None = None, *, announce: bool = True
) -> None:
    check_bind_safety(settings.api)
    stop = _stop_on_signals()
    app = create_app(settings, tracing)
    runner = api_runner(app, settings.api)
    await runner.setup()
    site = web.TCPSite(runner, settings.api.host, settings.api.port, shutdown_timeout=5.0)
    await listen(site, settings.api, runner)
    if announce:
        log.info("API listening on http://%s:%d", settings.api.host, settings.api.port)
    try:
        await stop.wait()
        await drain_api(
            app[STATE].drain,
            stop,
            grace_seconds=settings.api.drain_grace_seconds,
            stream_seconds=settings.api.stream_drain_seconds,
        )
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
    """API and worker in one process, with a private Redis unless one was configured. The
    private Redis is stopped on every way out, a failed start included (and dies with this
    process even when it is killed: ``EmbeddedRedis``)."""
    if not settings.api.api_key:
        settings = settings.replace(api_key="hq-" + secrets.token_urlsafe(24))
    if not settings.webhooks.allowed_hosts:
        # A webhook receiver on this machine is what one tries locally.
        settings = settings.replace(webhook_allowed_hosts=DEV_WEBHOOK_HOSTS)
    check_bind_safety(settings.api)
    embedded = None if redis_url_given else EmbeddedRedis.start()
    try:
        if embedded is not None:
            settings = settings.replace(redis_url=embedded.url)
        await _run_dev(settings, embedded is not None, tracing)
    finally:
        if embedded is not None:
            embedded.stop()


def _announce_dev(settings: Settings, embedded: bool, state: Path) -> None:
    """The banner: where dev listens, its key, and what the command line needs to find it
    (the state file it reads by itself, and the exports for anywhere else)."""
    base = f"http://{settings.api.host}:{settings.api.port}"
    key = settings.api.api_key
    exports = {"HERMES_QUEUE_REDIS_URL": settings.redis.url, "HERMES_QUEUE_API_KEY": key}
    exports["HERMES_QUEUE_STORE_URL"] = deployment.absolute_store_url(settings.store.url)
    for name, value in (("host", settings.api.host), ("port", settings.api.port)):
        if value != getattr(ApiSettings(), name):
            exports[f"HERMES_QUEUE_{name.upper()}"] = str(value)
    print(f"hermes-queue dev is up\n  base URL: {base}\n  API key:  {key}")
    print(f"  redis:    {settings.redis.url}{' (embedded)' if embedded else ''}")
    print(f"  agent:    {settings.agents.backend}")
    body = '\'{"input":"hello"}\''
    print(f'  try:      curl -s -H "Authorization: Bearer {key}" -d {body} {base}/v1/runs')
    print(f"  CLI:      hermes-queue status, runs, tail and check find this instance ({state})")
    print("            elsewhere (another user, a container), export:")
    print("            export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in exports.items()))
    sys.stdout.flush()


async def _run_dev(settings: Settings, embedded: bool, tracing: Tracing | None) -> None:
    stop = _stop_on_signals()
    worker = build_worker(settings, handle_signals=False, tracing=tracing)
    runner = api_runner(create_app(settings, tracing), settings.api)
    await runner.setup()
    await listen(web.TCPSite(runner, settings.api.host, settings.api.port), settings.api, runner)
    worker_task = worker.start()
    try:
        _announce_dev(settings, embedded, deployment.write(settings))
        await stop.wait()
    finally:
        worker.stop_taking_jobs()
        worker_task.cancel()
        await asyncio.gather(worker_task, return_exceptions=True)
        await worker.close()
        await runner.cleanup()
        deployment.remove()
