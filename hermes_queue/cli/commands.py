"""The ``hermes-queue`` command: parses options into Settings and dispatches. No logic here."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import click

from hermes_queue.cli.failures import DEBUG, ConfigFailure, FailingCleanly, Failure
from hermes_queue.config import Settings, load_settings, setting_sources
from hermes_queue.logs import configure_logging
from hermes_queue.tenancy.keys import tenant_problem

if TYPE_CHECKING:
    from hermes_queue.cli.deployment import Deployment
    from hermes_queue.tracing.spans import Tracing


# How long ``tail`` keeps trying an API it never reached before it says so.
UNREACHED_SECONDS = 3.0


def _settings(**overrides: Any) -> Settings:
    """The settings (environment, file, then ``overrides`` from options), validated; a bad one
    is one ``error: …`` line and exit 2. A DEBUG log level also asks for tracebacks."""
    settings = load_settings()
    settings = settings.replace(**{k: v for k, v in overrides.items() if v is not None})
    settings.validate()
    if settings.process.log_level.upper() == "DEBUG":
        click.get_current_context().find_root().meta[DEBUG] = True
    return settings


def _serving(settings: Settings, role: str) -> Tracing | None:
    """What every serving process does before it starts: the checks that need more than the
    settings (``preflight``), its logging and its tracing (returned, for the services it
    starts)."""
    from hermes_queue.cli.preflight import preflight

    preflight(settings)
    configure_logging(
        settings.process.log_level,
        settings.process.log_format,
        # Tenant keys given in clear too (tenancy/keys.py keeps only their digests itself).
        secrets=[k.clear or "" for k in settings.api.tenant_keys()] or [settings.api.api_key],
        urls=(settings.redis.url, settings.store.url),
    )
    return _trace(role)


def _trace(role: str) -> Tracing | None:
    """OpenTelemetry traces when the standard OTEL_* variables name an endpoint (tracing/)."""
    from hermes_queue import tracing

    try:
        return tracing.install(os.environ, role)
    except ValueError as exc:  # an OTEL_* value this installation cannot honour
        raise ConfigFailure(str(exc)) from None


@click.group(cls=FailingCleanly)
@click.version_option(package_name="hermes-queue")
@click.option("--debug", is_flag=True, help="On failure, print the traceback above the error line.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """hermes-queue: the Hermes agent API, scaled out over arq workers and Redis Streams.

    A failure is one `error: …` line on stderr: exit 2 for a bad setting, 1 otherwise."""
    ctx.meta[DEBUG] = debug


@main.command()
@click.option("--host", default=None, help="Bind address (default from settings: 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default 8642).")
def api(host: str | None, port: int | None) -> None:
    """Run an API replica (stateless; run as many as you like)."""
    from hermes_queue.cli.serve import serve_api

    settings = _settings(host=host, port=port)
    _run(serve_api(settings, _serving(settings, "api")), settings.process.event_loop)


@main.command()
@click.option("--concurrency", type=int, default=None, help="Turns run at once by this worker.")
def worker(concurrency: int | None) -> None:
    """Run a worker that executes agent turns from the queue."""
    from hermes_queue.cli.serve import serve_worker

    settings = _settings(worker_concurrency=concurrency)
    _run(serve_worker(settings, _serving(settings, "worker")), settings.process.event_loop)


@main.command()
@click.option("--host", default=None)
@click.option("--port", type=int, default=None)
def dev(host: str | None, port: int | None) -> None:
    """API + worker in one process with a private Redis and the echo agent: try it locally."""
    from hermes_queue.cli.serve import serve_dev

    settings = _settings(host=host, port=port)
    tracing = _serving(settings, "dev")
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
    from hermes_queue.cli.preflight import check_store_directory
    from hermes_queue.store import StoreError, create_store

    settings = _settings()
    check_store_directory(settings.store)

    async def apply() -> list[int]:
        store = create_store(settings.store.url, schema=settings.store.schema or None)
        try:
            return await store.migrate()
        finally:
            await store.close()

    try:
        applied = asyncio.run(apply())
    except StoreError as exc:
        raise Failure(f"migration failed: {exc}") from None
    if applied:
        click.echo(f"applied migrations {', '.join(map(str, applied))}")
    else:
        click.echo("session store is up to date")


@main.command()
@click.argument("run_id")
@click.option("--url", default=None, help="API base URL (default http://HOST:PORT from settings).")
@click.option("--after", default=None, help="Resume after this event id.")
@click.option(
    "--tenant",
    default=None,
    help="The tenant whose run it is (the operator's key acts as it, through /p/TENANT/).",
)
def tail(run_id: str, url: str | None, after: str | None, tenant: str | None) -> None:
    """Follow a run's events to its end, resuming across dropped connections."""
    from hermes_queue.client import ClientError, HermesQueueClient, Unreachable

    settings = _deployment().settings
    base = url or f"http://{settings.api.host}:{settings.api.port}"
    if tenant:
        if (problem := tenant_problem(tenant)) is not None:
            raise Failure(f"--tenant: {problem}")
        base = f"{base.rstrip('/')}/p/{tenant}"
    # Resuming is for streams that dropped; one that never connected fails within seconds.
    client = HermesQueueClient(
        base, settings.api.api_key, give_up_unreached=UNREACHED_SECONDS, connect_timeout=3.0
    )

    async def follow() -> None:
        async with client:
            async for event_id, payload in client.iter_events(run_id, after=after):
                click.echo(f"{event_id} {json.dumps(payload, ensure_ascii=False)}")

    try:
        asyncio.run(follow())
    except Unreachable as exc:
        raise Failure(
            f"{exc}: start one (hermes-queue dev, or hermes-queue api), or name it with --url "
            "(or HERMES_QUEUE_HOST and HERMES_QUEUE_PORT)"
        ) from None
    except ClientError as exc:
        raise Failure(str(exc)) from None


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
    deployment = _deployment(announce="stderr" if as_json else "stdout")
    _ops().warn_if_nothing_here(deployment)
    _ops().status(deployment.settings, as_json=as_json, watch=watch, iterations=iterations)


@main.group()
def runs() -> None:
    """Inspect runs and act on them (reads Redis directly, like status)."""


@runs.command("list")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True)
@click.option("--offset", type=click.IntRange(0), default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print both pages as JSON.")
@click.option("--wide", is_flag=True, help="One line per run, whatever the terminal's width.")
def runs_list(limit: int, offset: int, as_json: bool, wide: bool) -> None:
    """Queued (ready) runs with their position and wait, then in-flight runs; full ids."""
    deployment = _deployment(announce="stderr" if as_json else "stdout")
    _ops().warn_if_nothing_here(deployment)
    _runs().runs_list(deployment.settings, limit=limit, offset=offset, as_json=as_json, wide=wide)


@runs.command("show")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print the hermes.run object as JSON.")
def runs_show(run_id: str, as_json: bool) -> None:
    """One run's status, attempt, worker, failure reason and pending approval request."""
    deployment = _deployment(announce="stderr" if as_json else "stdout")
    _runs().runs_show(deployment.settings, run_id, as_json=as_json)


@runs.command("stop")
@click.argument("run_id")
def runs_stop(run_id: str) -> None:
    """Stop a run: a queued one is cancelled at once, a running one is told to stop."""
    _runs().runs_stop(_deployment(announce="stderr").settings, run_id)


@runs.command("approve")
@click.argument("run_id")
@click.argument("choice", metavar="once|session|always|deny")
@click.option("--request-id", default="", help="The pending request to answer (default: oldest).")
@click.option("--all", "resolve_all", is_flag=True, help="Answer every pending request.")
def runs_approve(run_id: str, choice: str, request_id: str, resolve_all: bool) -> None:
    """Answer a run's approval request, as POST /v1/runs/RUN_ID/approval does."""
    _runs().runs_approve(
        _deployment(announce="stderr").settings,
        run_id,
        choice,
        request_id=request_id,
        resolve_all=resolve_all,
    )


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

    deployment = _deployment()
    sys.exit(run_check(deployment.settings, role, deployment.source))


def _deployment(*, announce: Literal["stdout", "stderr", None] = None) -> Deployment:
    """The settings an operator command uses: a running ``hermes-queue dev``'s when
    ``redis_url`` is not set (``cli/deployment.py``). ``announce``: print which it is as the
    first line (on stderr when stdout carries JSON)."""
    from hermes_queue.cli.deployment import resolve

    deployment = resolve(_settings(), setting_sources())
    if deployment.stale:
        click.echo(f"note: {deployment.stale}", err=True)
    if announce is not None:
        click.echo(deployment.line, err=announce == "stderr")
    return deployment


def _runs() -> ModuleType:
    from hermes_queue.cli import runs as cli_runs

    return cli_runs


@main.command("redis-switchover")
@click.option(
    "--replica",
    default=None,
    help="Redis Cluster only: the replica (HOST:PORT) to promote in place of its primary.",
)
@click.option(
    "--timeout",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds the switch may take (writes wait at most this long, usually ~1 s).",
)
def redis_switchover(replica: str | None, timeout: float) -> None:
    """Switch the Redis primary to a replica without failing a request or losing a write
    (Sentinel: pause writes, let the replicas catch up, fail over, make the old primary a
    replica; Cluster: CLUSTER FAILOVER on --replica). See docs/deploy.md, Rollouts."""
    from hermes_queue.cli.switchover import SwitchoverError, switchover

    settings = _settings()
    try:
        done = switchover(settings.redis, replica=replica, timeout=timeout, say=click.echo)
    except SwitchoverError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"switched in {done.total_seconds:.2f} s (writes waited {done.paused_seconds:.2f} s)"
    )


def _ops() -> ModuleType:
    """The operator commands' module, imported on use: it pulls in redis and rich, which
    would slow every other command (and --help) by a third of a second."""
    from hermes_queue.cli import ops as cli_ops

    return cli_ops


def _run(coro: Any, event_loop: str = "asyncio") -> None:
    """Run a serving process to its end; what it raises is reported by ``FailingCleanly``."""
    from hermes_queue import loops

    with contextlib.suppress(KeyboardInterrupt):
        loops.run(coro, event_loop)
