"""Upstream endpoints hermes-queue does not provide.

A client written for upstream Hermes that calls one of these must get a clear, machine-readable
answer instead of the generic 404 ``not_found``, which reads like a typo in the URL or a wrong
base URL. So each one is routed and answers **501** with the usual JSON envelope, code
``not_implemented``, naming the endpoint and pointing to ``docs/compatibility.md``. Auth runs
first, as on every other route: an unauthenticated caller learns nothing about the surface.

These routes must never make ``/v1/capabilities`` claim the feature: discovery derives its
endpoint list and feature flags from the router, so every 501 handler here is marked
(:func:`is_not_implemented`) and discovery skips marked routes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from aiohttp import web

from hermes_queue.api.endpoint import Answer, Endpoint, Handler
from hermes_queue.api.errors import ApiError, ErrorEnvelope

DOC = "docs/compatibility.md"
# Set on every 501 handler; discovery reads it (never a feature, never an endpoint).
_MARKER = "__hermes_not_implemented__"


@dataclass(frozen=True, slots=True)
class Unsupported:
    """One upstream endpoint this server answers with 501, and why (for the message)."""

    method: str
    path: str
    what: str


PLATFORMS = "messaging platform callbacks (no platform adapters here)"
BROWSER = "browser-extension control (tools do not run in a browser here)"
ARTIFACTS = "browser artifact transfer (no browser-control broker here)"

UNSUPPORTED: tuple[Unsupported, ...] = (
    Unsupported(
        "POST",
        "/api/cron/fire",
        "the external scheduler webhook (workers fire scheduled jobs themselves)",
    ),
    Unsupported("POST", "/api/platforms/{platform}/events", PLATFORMS),
    Unsupported(
        "GET",
        "/api/model/options",
        "the provider/model picker inventory (choose models with model_routes and GET /v1/models)",
    ),
    Unsupported("POST", "/v1/browser-control/register", BROWSER),
    Unsupported("GET", "/v1/browser-control/ws", BROWSER),
    Unsupported("POST", "/v1/artifacts/upload", ARTIFACTS),
    Unsupported("GET", "/v1/artifacts/download/{artifact_id}", ARTIFACTS),
)


def is_not_implemented(handler: object) -> bool:
    """True for a 501 placeholder from this module: discovery must not count its route."""
    return bool(getattr(handler, _MARKER, False))


def not_implemented_handler(endpoint: Unsupported) -> Handler:
    """A handler answering 501 ``not_implemented`` for ``endpoint``, marked for discovery."""
    message = (
        f"{endpoint.method} {endpoint.path} is not provided by hermes-queue: {endpoint.what}. "
        f"See {DOC}."
    )

    async def handler(request: web.Request) -> web.StreamResponse:
        raise ApiError(501, "not_implemented", message)

    handler.__name__ = f"not_implemented_{endpoint.method.lower()}"
    setattr(handler, _MARKER, True)
    return handler


def placeholders(served: Iterable[Endpoint | web.RouteDef]) -> list[Endpoint]:
    """The 501 rows for every endpoint above that ``served`` does not route, documented as not
    provided.

    A method and path the route table already serves is skipped, so implementing one of these
    endpoints for real never collides with its placeholder (aiohttp refuses a second route for
    the same method and path).
    """
    taken = {(route.method, route.path) for route in served}
    return [
        Endpoint(
            endpoint.method,
            endpoint.path,
            not_implemented_handler(endpoint),
            "Not provided by this server (upstream has it)",
            "not provided",
            {501: Answer("Not implemented", ErrorEnvelope)},
            # The method named only: a HEAD stays 405, as on any route registered for GET alone.
            head=False,
        )
        for endpoint in UNSUPPORTED
        if (endpoint.method, endpoint.path) not in taken
    ]
