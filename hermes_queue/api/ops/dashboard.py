"""``GET /dashboard``: the operator's live view of the queue, a static page served by the API.

The page and its two assets hold no data and are served without the API key (a browser cannot
send one when navigating): the operator types the key into the page once, and its script sends
it as a bearer token to ``/v1/queue/stream``, ``/v1/runs/{id}``, ``/v1/runs/{id}/events`` and
``/api/jobs``, which are authenticated as usual. Nothing is loaded from anywhere but this
origin, and the responses carry their own Content-Security-Policy saying so (no inline script
or style).
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from aiohttp import web

# Same-origin script, style and fetch() only; nothing inline, no frames, no forms posted.
DASHBOARD_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
# Served at these paths, in this order: (file under static/, content type).
ASSETS = {
    "/dashboard": ("dashboard.html", "text/html"),
    "/dashboard/app.js": ("app.js", "text/javascript"),
    "/dashboard/app.css": ("app.css", "text/css"),
}


@cache
def _asset(name: str) -> bytes:
    return (files("hermes_queue.api") / "static" / name).read_bytes()


async def serve_asset(request: web.Request) -> web.Response:
    name, content_type = ASSETS[request.path]
    return web.Response(
        body=_asset(name),
        content_type=content_type,
        charset="utf-8",
        headers={
            "Content-Security-Policy": DASHBOARD_CSP,
            # Revalidate every time: a new release must never run against a stale script.
            "Cache-Control": "no-cache",
        },
    )
