"""The API application factory: the only way to build the app, in production and in tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web

from hermes_queue import __version__
from hermes_queue.aio import cancel_and_wait
from hermes_queue.api import (
    approvals,
    chat_completions,
    dashboard,
    discovery,
    operations,
    responses,
    runs,
    runtime_selection,
    session_chat,
    sessions,
    skills,
    unsupported,
)
from hermes_queue.api.appkeys import HUB, REDIS, RUNS, SETTINGS, STORE
from hermes_queue.api.middlewares import MIDDLEWARES, add_security_headers
from hermes_queue.config import Settings
from hermes_queue.redis_client import connect
from hermes_queue.runs.repository import RunRepository
from hermes_queue.store import open_store
from hermes_queue.streams.hub import StreamHub
from hermes_queue.workers.reaper import reap_forever


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "platform": "hermes-agent", "version": __version__})


async def _backends(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    redis = connect(settings)
    hub = StreamHub.from_settings(settings, redis=redis)
    await hub.start()
    app[REDIS] = redis
    # Runs this process ends (stop of a queued run, reaper) count in its runs_total.
    app[RUNS] = RunRepository(redis, settings, on_finished=app[operations.METRICS].count_outcome)
    app[HUB] = hub
    app[STORE] = await open_store(settings)
    # The API reaps too, so a run whose only worker died is still settled.
    reaper = asyncio.create_task(reap_forever(app[RUNS], settings.reaper_interval_seconds))
    yield
    await cancel_and_wait(reaper)
    await hub.aclose()
    await app[STORE].close()
    await redis.aclose()


def create_app(settings: Settings) -> web.Application:
    app = web.Application(middlewares=MIDDLEWARES, client_max_size=settings.body_limit_bytes)
    app[SETTINGS] = settings
    app.cleanup_ctx.append(_backends)
    app.on_response_prepare.append(add_security_headers)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/health", health)
    runtime_selection.install(app)
    runs.add_routes(app)
    approvals.add_routes(app)
    sessions.add_routes(app)
    session_chat.add_routes(app)
    discovery.add_routes(app)
    skills.add_routes(app)
    chat_completions.add_routes(app)
    responses.add_routes(app)
    operations.setup(app)
    dashboard.add_routes(app)
    unsupported.add_routes(app)  # last: skips any path another module serves
    return app
