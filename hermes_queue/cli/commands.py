"""The ``hermes-queue`` command: parses options into Settings and dispatches. No logic here."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

import click

from hermes_queue.config import ConfigError, Settings, load_settings
from hermes_queue.logs import configure_logging

if TYPE_CHECKING:
    from hermes_queue.tracing.spans import Tracing


def _settings(**overrides: Any) -> Settings:
    try:
        settings = load_settings()
        return settings.replace(**{k: v for k, v in overrides.items() if v is not None}).validate()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _trace(role: str) -> Tracing | None:
    """OpenTelemetry traces when the standard OTEL_* variables name an endpoint (tracing/)."""
    from hermes_queue import tracing

    try:
        return tracing.install(os.environ, role)
    except ValueError as exc:  # an OTEL_* value this installation cannot honour
        raise click.ClickException(str(exc)) from None


@click.group()
@click.version_option(package_name="hermes-queue")
def main() -> None:
    """hermes-queue: the Hermes agent API, scaled out over arq workers and Redis Streams."""


@main.command()
@click.option("--host", default=None, help="Bind address (default from settings: 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default 8642).")
def api(host: str | None, port: int | None) -> None:
    """Run an API replica (stateless; run as many as you like)."""
    from hermes_queue.cli.serve import serve_api

    settings = _settings(host=host, port=port)
    configure_logging(
        settings.process.log_level,
        settings.process.log_format,
        secrets=(settings.api.api_key,),
        urls=(settings.redis.url, settings.store.url),
    )
    _run(serve_api(settings, _trace("api")), settings.process.event_loop)


@main.command()
@click.option("--concurrency", type=int, default=None, help="Turns run at once by this worker.")
def worker(concurrency: int | None) -> None:
    """Run a worker that executes agent turns from the queue."""
    from hermes_queue.cli.serve import serve_worker

    settings = _settings(worker_concurrency=concurrency)
    configure_logging(
        settings.process.log_level,
        settings.process.log_format,
        secrets=(settings.api.api_key,),
        urls=(settings.redis.url, settings.store.url),
    )
    _run(serve_worker(settings, _trace("worker")), settings.process.event_loop)


@main.command()
@click.option("--host", default=None)
@click.option("--port", type=int, default=None)
def dev(host: str | None, port: int | None) -> None:
    """API + worker in one process with a private Redis and the echo agent: try it locally."""
    from hermes_queue.cli.serve import serve_dev

    settings = _settings(host=host, port=port)
    configure_logging(
        settings.process.log_level,
        settings.process.log_format,
        secrets=(settings.api.api_key,),
        urls=(settings.redis.url, settings.store.url),
    )
    tracing = _trace("dev")
    _run(
        serve_dev(settings, "HERMES_QUEUE_REDIS_URL" in os.environ, tracing),
        settings.process.event_loop,
    )


@main.group()
def config() -> None:
    """Inspect the settings."""


@config.command("check")
def config_check() -> None:
    """Validate the settings and say which providers have usable credentials (no secrets)."""
    from hermes_queue.providers import CredentialsUnavailable, resolve_api_key

    settings = _settings()
    click.echo(
        f"settings OK (namespace {settings.redis.namespace!r}, agent {settings.agents.backend})"
    )
    unusable = 0
    for name, provider in sorted(settings.routing.providers.items()):
        try:
            resolve_api_key(provider)
        except CredentialsUnavailable as exc:
            unusable += 1
            click.echo(f"  provider {name}: NO CREDENTIALS ({exc})")
        else:
            source = provider.api_key_env or provider.api_key_file
            click.echo(f"  provider {name}: credentials found ({source}) at {provider.base_url}")
    for alias, route in sorted(settings.routing.model_routes.items()):
        click.echo(f"  route {alias} -> {route.provider or '(default)'}:{route.model}")
    if settings.agents.backend == "hermes":
        from importlib.metadata import PackageNotFoundError, version

        try:
            click.echo(f"  hermes-agent {version('hermes-agent')} installed")
        except PackageNotFoundError:
            unusable += 1
            click.echo("  hermes-agent NOT INSTALLED (pip install 'hermes-queue[hermes]')")
    if unusable:
        sys.exit(1)


@main.command()
def migrate() -> None:
    """Apply pending session-store migrations (also done on start unless migrate_on_start=false)."""
    from hermes_queue.store import StoreError, create_store

    settings = _settings()

    async def apply() -> list[int]:
        store = create_store(settings.store.url, schema=settings.store.schema or None)
        try:
            return await store.migrate()
        finally:
            await store.close()

    try:
        applied = asyncio.run(apply())
    except StoreError as exc:
        raise click.ClickException(f"migration failed: {exc}") from None
    if applied:
        click.echo(f"applied migrations {', '.join(map(str, applied))}")
    else:
        click.echo("session store is up to date")


@main.command()
@click.argument("run_id")
@click.option("--url", default=None, help="API base URL (default http://HOST:PORT from settings).")
@click.option("--after", default=None, help="Resume after this event id.")
def tail(run_id: str, url: str | None, after: str | None) -> None:
    """Follow a run's events to its end, resuming across dropped connections."""
    from hermes_queue.client import ClientError, HermesQueueClient

    settings = _settings()
    base = url or f"http://{settings.api.host}:{settings.api.port}"

    async def follow() -> int:
        async with HermesQueueClient(base, settings.api.api_key) as client:
            try:
                async for event_id, payload in client.iter_events(run_id, after=after):
                    click.echo(f"{event_id} {json.dumps(payload, ensure_ascii=False)}")
            except ClientError as exc:
                click.echo(f"error: {exc}", err=True)
                return 1
        return 0

    sys.exit(asyncio.run(follow()))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the hermes.queue snapshot as JSON.")
@click.option(
    "--watch",
    type=click.FloatRange(0.1, 3600),
    is_flag=False,
    flag_value=2.0,
    default=None,
    metavar="[SECONDS]",
    help="Refresh every SECONDS (default 2) until Ctrl-C.",
)
@click.option("--iterations", type=click.IntRange(1), default=None, hidden=True)
def status(as_json: bool, watch: float | None, iterations: int | None) -> None:
    """Queue depth by state, oldest ready age, workers, throughput and recent failures."""
    _ops().status(_settings(), as_json=as_json, watch=watch, iterations=iterations)


@main.group()
def runs() -> None:
    """Inspect and stop runs (reads Redis directly, like status)."""


@runs.command("list")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True)
@click.option("--offset", type=click.IntRange(0), default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the page as JSON.")
def runs_list(limit: int, offset: int, as_json: bool) -> None:
    """In-flight runs: id, session, status, worker, attempt, age."""
    _ops().runs_list(_settings(), limit=limit, offset=offset, as_json=as_json)


@runs.command("show")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print the hermes.run object as JSON.")
def runs_show(run_id: str, as_json: bool) -> None:
    """One run's status, attempt, worker and failure reason."""
    _ops().runs_show(_settings(), run_id, as_json=as_json)


@runs.command("stop")
@click.argument("run_id")
def runs_stop(run_id: str) -> None:
    """Stop a run: a queued one is cancelled at once, a running one is told to stop."""
    _ops().runs_stop(_settings(), run_id)


@main.group()
def webhooks() -> None:
    """Webhook deliveries: the recent ones and dead letters, and redelivery (reads Redis)."""


@webhooks.command("list")
@click.option(
    "--state",
    type=click.Choice(["pending", "delivered", "dead", "gone"]),
    default=None,
    help="Only deliveries in this state (dead: the dead letters).",
)
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the deliveries as JSON.")
def webhooks_list(state: str | None, limit: int, as_json: bool) -> None:
    """The newest deliveries with their attempts: id (its webhook-id), run, event, target."""
    from hermes_queue.cli import webhooks as cli_webhooks

    cli_webhooks.deliveries_list(_settings(), state=state, limit=limit, as_json=as_json)


@webhooks.command("redeliver")
@click.argument("delivery_id")
def webhooks_redeliver(delivery_id: str) -> None:
    """Send a delivery again now, on a fresh schedule, under the same webhook-id."""
    from hermes_queue.cli import webhooks as cli_webhooks

    cli_webhooks.redeliver(_settings(), delivery_id)


@main.command()
@click.option("--role", type=click.Choice(["api", "worker"]), default="api", show_default=True)
def check(role: str) -> None:
    """Exit 0 when Redis and the session store answer (container readiness probes)."""
    from hermes_queue.cli.check import check as run_check

    sys.exit(run_check(_settings(), role))


def _ops() -> ModuleType:
    """The operator commands' module, imported on use: it pulls in redis and rich, which
    would slow every other command (and --help) by a third of a second."""
    from hermes_queue.cli import ops as cli_ops

    return cli_ops


def _run(coro: Any, event_loop: str = "asyncio") -> None:
    from hermes_queue import loops

    try:
        loops.run(coro, event_loop)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        pass
