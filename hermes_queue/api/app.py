"""The API application factory: the only way to build the app, in production and in tests.

A request goes through the middlewares (``middlewares.py``), is routed by the route rows
(``routes.py``) to its handler, and the handler uses the process's services (``state.py``).
The app keeps its rows (``endpoint.SERVED``): ``/openapi.json`` is built from them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from hermes_queue.aio import cancel_and_wait
from hermes_queue.api.endpoint import SERVED, under_profile
from hermes_queue.api.middlewares import (
    ACCESS,
    MIDDLEWARES,
    REDIS_OUTAGE,
    Access,
    add_security_headers,
    close_while_draining,
    redis_outage,
)
from hermes_queue.api.routes import ROUTES
from hermes_queue.api.state import STATE, ApiState
from hermes_queue.config import Settings
from hermes_queue.runs.reaper import reap_forever

if TYPE_CHECKING:
    from hermes_queue.tracing.spans import Tracing


def _lifetime(
    settings: Settings, tracing: Tracing | None
) -> Callable[[web.Application], AsyncIterator[None]]:
    """The app's cleanup context: open the process's state at startup, close it at cleanup."""

    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        state = app[STATE] = await ApiState.open(settings, tracing)
        # The API reaps too, so a run whose only worker died is still settled.
        reaper = asyncio.create_task(
            reap_forever(state.runs, settings.runs.reaper_interval_seconds)
        )
        yield
        await cancel_and_wait(reaper)
        await state.aclose()

    return lifetime


def create_app(settings: Settings, tracing: Tracing | None = None) -> web.Application:
    """The app; ``tracing``: this process's (hermes_queue/tracing/), when it traces."""
    # A server span per request, outermost, when tracing is on.
    middlewares = MIDDLEWARES if tracing is None else [tracing.http_middleware(), *MIDDLEWARES]
    app = web.Application(middlewares=middlewares, client_max_size=settings.api.body_limit_bytes)
    app[REDIS_OUTAGE] = redis_outage()
    app.cleanup_ctx.append(_lifetime(settings, tracing))
    app.on_response_prepare.append(add_security_headers)
    app.on_response_prepare.append(close_while_draining)
    app.add_routes(ROUTES)
    # Upstream's /p/<profile>/… routes: the same operations, acting as that tenant.
    app.add_routes([under_profile(row) for row in ROUTES])
    app[SERVED] = tuple(ROUTES)
    app[ACCESS] = Access.of(ROUTES)
    return app
