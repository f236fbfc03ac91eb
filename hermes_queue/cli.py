"""The ``hermes-queue`` command: parses options into Settings and dispatches. No logic here."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import click

from hermes_queue.config import ConfigError, Settings, load_settings
from hermes_queue.logs import configure_logging


def _settings(**overrides: Any) -> Settings:
    try:
        settings = load_settings()
        return settings.replace(**{k: v for k, v in overrides.items() if v is not None}).validate()
    except ConfigError as exc:
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
    from hermes_queue.serve import serve_api

    settings = _settings(host=host, port=port)
    configure_logging(settings.log_level)
    _run(serve_api(settings))


@main.command()
@click.option("--concurrency", type=int, default=None, help="Turns run at once by this worker.")
def worker(concurrency: int | None) -> None:
    """Run a worker that executes agent turns from the queue."""
    from hermes_queue.serve import serve_worker

    settings = _settings(worker_concurrency=concurrency)
    configure_logging(settings.log_level)
    _run(serve_worker(settings))


@main.command()
@click.option("--host", default=None)
@click.option("--port", type=int, default=None)
def dev(host: str | None, port: int | None) -> None:
    """API + worker in one process with a private Redis and the echo agent: try it locally."""
    from hermes_queue.serve import serve_dev

    settings = _settings(host=host, port=port)
    configure_logging(settings.log_level)
    _run(serve_dev(settings, redis_url_given="HERMES_QUEUE_REDIS_URL" in os.environ))


@main.group()
def config() -> None:
    """Inspect the settings."""


@config.command("check")
def config_check() -> None:
    """Validate the settings and say which providers have usable credentials (no secrets)."""
    from hermes_queue.providers import CredentialsUnavailable, resolve_api_key

    settings = _settings()
    click.echo(f"settings OK (namespace {settings.namespace!r}, agent {settings.agent_backend})")
    unusable = 0
    for name, provider in sorted(settings.providers.items()):
        try:
            resolve_api_key(provider)
        except CredentialsUnavailable as exc:
            unusable += 1
            click.echo(f"  provider {name}: NO CREDENTIALS ({exc})")
        else:
            source = provider.api_key_env or provider.api_key_file
            click.echo(f"  provider {name}: credentials found ({source}) at {provider.base_url}")
    for alias, route in sorted(settings.model_routes.items()):
        click.echo(f"  route {alias} -> {route.provider or '(default)'}:{route.model}")
    if unusable:
        sys.exit(1)


@main.command()
def migrate() -> None:
    """Apply pending session-store migrations (also done on start unless migrate_on_start=false)."""
    from hermes_queue.store import StoreError, create_store

    settings = _settings()

    async def apply() -> list[int]:
        store = create_store(settings.store_url, schema=settings.store_schema or None)
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
    base = url or f"http://{settings.host}:{settings.port}"

    async def follow() -> int:
        async with HermesQueueClient(base, settings.api_key) as client:
            try:
                async for event_id, payload in client.iter_events(run_id, after=after):
                    click.echo(f"{event_id} {json.dumps(payload, ensure_ascii=False)}")
            except ClientError as exc:
                click.echo(f"error: {exc}", err=True)
                return 1
        return 0

    sys.exit(asyncio.run(follow()))


def _run(coro: Any) -> None:
    try:
        asyncio.run(coro)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        pass
