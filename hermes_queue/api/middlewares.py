"""Cross-cutting request handling, so no handler checks auth, CORS or drain, or formats an
error itself."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from aiohttp import web
from redis.exceptions import RedisClusterException, RedisError

from hermes_queue.api.endpoint import PROFILE_PREFIX, Endpoint
from hermes_queue.api.errors import ApiError, auth_error, redis_unavailable
from hermes_queue.api.http.sse import STREAM_OPEN
from hermes_queue.api.http.tenancy import PRINCIPAL, operator_only
from hermes_queue.api.state import STATE
from hermes_queue.logs import request_id_var
from hermes_queue.redisio.health import OutageLog, classify
from hermes_queue.store.base import StoreUnavailable
from hermes_queue.tenancy.keys import DEFAULT_TENANT, Principal

log = logging.getLogger(__name__)
# The app's log of Redis outages seen by requests (``redis_outage``), one per app.
REDIS_OUTAGE = web.AppKey("redis_outage", OutageLog)


def redis_outage() -> OutageLog:
    """Requests only see failures: one after 30 s without any is logged as a new outage."""
    return OutageLog(
        log, "API requests", quiet_after=30.0, meanwhile="answering 503 redis_unavailable"
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Access:
    """Which route paths (their canonical form, without a ``/p/{profile}`` prefix) need no key
    and which are the operator's alone: read from the route rows (``Endpoint.public``,
    ``Endpoint.operator``). The dashboard page and its assets hold no data (its script sends
    the key to the JSON/SSE API); the OpenAPI document describes the API, not its data."""

    public: frozenset[str]
    operator: frozenset[str]

    @classmethod
    def of(cls, rows: Iterable[Endpoint]) -> Access:
        rows = list(rows)
        return cls(
            frozenset(r.path for r in rows if r.public),
            frozenset(r.path for r in rows if r.operator),
        )


ACCESS = web.AppKey("access", Access)
REQUEST_ID = web.RequestKey("request_id", str)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
    "Strict-Transport-Security": "max-age=31536000; includeSubDomains",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "X-XSS-Protection": "0",
    "Referrer-Policy": "no-referrer",
}


# -- CORS (upstream-api.md §1.4) -------------------------------------------------------------------
# Upstream allows GET, POST, DELETE, OPTIONS and Authorization, Content-Type, Idempotency-Key;
# we add PATCH (sessions), Last-Event-ID (stream resume) and the session headers, and expose
# the response headers a browser client needs to read (run id, session id and key).
CORS_ALLOW_METHODS = "GET, POST, PATCH, DELETE, OPTIONS"
CORS_ALLOW_HEADERS = (
    "Authorization, Content-Type, Idempotency-Key, Last-Event-ID, "
    "X-Hermes-Session-Id, X-Hermes-Session-Key"
)
CORS_EXPOSE_HEADERS = (
    "X-Hermes-Session-Id, X-Hermes-Run-Id, X-Hermes-Session-Key, X-Request-Id, Idempotency-Replayed"
)
CORS_MAX_AGE = "600"


def cors_headers(origin: str, allowed: tuple[str, ...]) -> dict[str, str] | None:
    """The CORS headers for ``origin``, or None when it is not allowed."""
    if "*" in allowed:
        allow_origin = "*"
    elif origin in allowed:
        allow_origin = origin
    else:
        return None
    return {
        "Access-Control-Allow-Origin": allow_origin,
        "Access-Control-Allow-Methods": CORS_ALLOW_METHODS,
        "Access-Control-Allow-Headers": CORS_ALLOW_HEADERS,
        "Access-Control-Expose-Headers": CORS_EXPOSE_HEADERS,
        "Access-Control-Max-Age": CORS_MAX_AGE,
    }


@web.middleware
async def cors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse a disallowed ``Origin`` with an empty 403 before anything else runs (upstream
    does, on every route: a browser page from elsewhere never reaches a handler), and answer
    preflights without auth. The headers themselves are added in :func:`add_security_headers`
    so SSE responses, prepared inside their handlers, carry them too. Same-origin pages (the
    dashboard) send no ``Origin`` on their GETs and pass untouched."""
    origin = request.headers.get("Origin")
    if origin is None:
        if request.method == "OPTIONS":  # a preflight always names its origin
            return web.Response(status=403)
        return await handler(request)
    if cors_headers(origin, request.app[STATE].settings.api.cors_origins) is None:
        return web.Response(status=403)
    if request.method == "OPTIONS":
        return web.Response(status=200)
    return await handler(request)


def _add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    origin = request.headers.get("Origin")
    if origin is None:
        return
    headers = cors_headers(origin, request.app[STATE].settings.api.cors_origins)
    if headers is None:
        return
    for name, value in headers.items():
        response.headers.setdefault(name, value)
    vary = response.headers.get("Vary")
    if vary is None:
        response.headers["Vary"] = "Origin"
    elif "origin" not in vary.lower():
        response.headers["Vary"] = f"{vary}, Origin"


# -- Drain (api/drain.py) -------------------------------------------------------------------------
@web.middleware
async def drain_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count every request in flight, so a stopping process exits only once they are answered
    (streams: once their run ended, within the stream-drain bound). Nothing is refused while the
    process drains, unlike upstream's 503 ``gateway_draining``: a request that still reaches a
    stopping replica is one its load balancer sent before it learned (docs/compatibility.md)."""
    with request.app[STATE].drain.holding():
        return await handler(request)


async def close_while_draining(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare hook: while the process drains every response ends its connection
    (``Connection: close``), so a kept-alive client sends its next request through the load
    balancer, to a replica that stays."""
    if request.app[STATE].drain.draining:
        response.force_close()
        response.headers["Connection"] = "close"


@web.middleware
async def request_id_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    incoming = request.headers.get("X-Request-Id", "")
    request_id = incoming if _REQUEST_ID.match(incoming) else uuid.uuid4().hex
    request[REQUEST_ID] = request_id
    token = request_id_var.set(request_id)
    try:
        return await handler(request)
    finally:
        request_id_var.reset(token)


def _cut_if_streaming(request: web.Request) -> None:
    """Mid-stream, an error answer would be written into the open event stream's body, where no
    client reads it as one: close the connection instead, so the client resumes elsewhere."""
    if request.get(STREAM_OPEN) and request.transport is not None:
        request.transport.close()


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes the JSON envelope; nothing reaches the client as a traceback."""
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except web.HTTPRequestEntityTooLarge:
        return ApiError(413, "body_too_large", "Request body too large.").response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status, "http_error")
        return ApiError(exc.status, code, exc.reason).response()
    except StoreUnavailable as exc:
        log.warning("session store unavailable while serving %s: %s", request.path, exc)
        return ApiError(
            503,
            "session_db_unavailable",
            "The session database is unavailable; retry shortly",
            headers={"Retry-After": "1"},
        ).response()
    except (RedisError, RedisClusterException, ConnectionRefusedError) as exc:
        if classify(exc) is None:  # a failed command, not a failed server
            log.exception("unhandled error serving %s %s", request.method, request.path)
            _cut_if_streaming(request)
            return ApiError(500, "internal_error", "Internal server error").response()
        # Down, or something that is not Redis answers there: logged once, not per request.
        request.app[REDIS_OUTAGE].failed(exc)
        _cut_if_streaming(request)
        return redis_unavailable().response()
    except Exception:
        log.exception("unhandled error serving %s %s", request.method, request.path)
        _cut_if_streaming(request)
        return ApiError(500, "internal_error", "Internal server error").response()


@web.middleware
async def body_limit_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse a declared oversize body before reading it (aiohttp's HTTP parser already
    answers a malformed Content-Length with a plain 400; chunked bodies hit client_max_size)."""
    length = request.content_length
    if length is not None and length > request.app[STATE].settings.api.body_limit_bytes:
        raise ApiError(413, "body_too_large", "Request body too large.")
    return await handler(request)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Resolve the bearer key to its tenant (one hash, one dict lookup: ``tenants.KeyTable``)
    and set the request's principal. ``/p/<tenant>/`` selects the tenant: a tenant's key only
    its own (else 401, upstream's answer for a key the profile does not accept), the operator's
    any configured one (else 404). A tenant's key on an operator surface: 403."""
    if request.method == "OPTIONS":
        return await handler(request)
    state = request.app[STATE]
    access = request.app[ACCESS]
    resource = request.match_info.route.resource
    path = request.path if resource is None else resource.canonical.removeprefix(PROFILE_PREFIX)
    # /metrics is public only when metrics_public says so (a scraper without the API key).
    if path in access.public or (state.settings.metrics.public and path == "/metrics"):
        return await handler(request)
    table = state.key_table
    tenant, operator = DEFAULT_TENANT, True
    if not table.open:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        found = table.tenant_of(token) if scheme.lower() == "bearer" else None
        if found is None:
            raise auth_error()
        tenant, operator = found, found == DEFAULT_TENANT
    profile = request.match_info.get("profile")
    if profile is not None and profile != tenant:
        if not operator:
            raise auth_error()
        if profile not in table.tenants:
            raise ApiError(404, "not_found", f"No such profile: {profile[:64]}")
        tenant = profile
    if path in access.operator and not operator:
        raise operator_only()
    request[PRINCIPAL] = Principal(tenant, operator)
    return await handler(request)


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare hook: also covers SSE responses, which are prepared early (inside
    their handlers, before any middleware sees the response). Adds CORS headers too."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if REQUEST_ID in request:
        response.headers.setdefault("X-Request-Id", request[REQUEST_ID])
    _add_cors_headers(request, response)


# Outermost first: drain counts every request, whatever answers it. CORS precedes the body
# limit (upstream's order) and everything that could answer with a body.
MIDDLEWARES = [
    drain_middleware,
    request_id_middleware,
    cors_middleware,
    error_middleware,
    body_limit_middleware,
    auth_middleware,
]
