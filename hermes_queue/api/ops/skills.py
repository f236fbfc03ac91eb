"""``GET /v1/skills`` and ``GET /v1/toolsets`` (upstream-api.md §2): what the workers'
backend offers.

The API never builds a backend, so it serves what the workers published in Redis
(:mod:`hermes_queue.catalog`): upstream's list shapes, with empty ``data`` when nothing is
published (the ``echo`` and ``openai`` backends have no catalog, or no worker is alive). A Redis
failure is the usual error envelope (503 ``redis_unavailable`` from the error middleware), never
an empty list that would read as "nothing installed". Auth is the middleware's, as on every
route.
"""

from __future__ import annotations

from aiohttp import web

from hermes_queue.api.state import STATE


async def skills(request: web.Request) -> web.Response:
    catalog = await request.app[STATE].catalog.get()
    return web.json_response({"object": "list", "data": catalog.skills if catalog else []})


async def toolsets(request: web.Request) -> web.Response:
    catalog = await request.app[STATE].catalog.get()
    data = catalog.toolsets if catalog else []
    return web.json_response({"object": "list", "platform": "api_server", "data": data})
