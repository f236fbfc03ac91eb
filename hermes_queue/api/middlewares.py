"""Cross-cutting request handling, so no handler checks auth or formats an error itself."""

from __future__ import annotations

import hmac
import logging
import re
import uuid
from collections.abc import Awaitable, Callable

from aiohttp import web
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.api.appkeys import SETTINGS
from hermes_queue.api.dashboard import ASSETS as DASHBOARD_ASSETS
from hermes_queue.api.errors import ApiError, auth_error
from hermes_queue.logs import request_id_var
from hermes_queue.store.base import StoreUnavailable

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The dashboard page and its assets hold no data (its script sends the key to the JSON/SSE API).
PUBLIC_PATHS = frozenset({"/health", "/v1/health", *DASHBOARD_ASSETS})
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


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes the JSON envelope; nothing reaches the client as a traceback."""
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except web.HTTPRequestEntityTooLarge:
        return ApiError(413, "body_too_large", "Request body too large").response()
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
    except (RedisConnectionError, RedisTimeoutError, ConnectionRefusedError) as exc:
        log.warning("Redis unavailable while serving %s: %s", request.path, exc)
        return ApiError(
            503,
            "redis_unavailable",
            "The queue backend (Redis) is unavailable; retry shortly",
            headers={"Retry-After": "1"},
        ).response()
    except Exception:
        log.exception("unhandled error serving %s %s", request.method, request.path)
        return ApiError(500, "internal_error", "Internal server error").response()


@web.middleware
async def body_limit_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse a declared oversize body before reading it (aiohttp's HTTP parser already
    answers a malformed Content-Length with a plain 400; chunked bodies hit client_max_size)."""
    length = request.content_length
    if length is not None and length > request.app[SETTINGS].body_limit_bytes:
        raise ApiError(413, "body_too_large", "Request body too large")
    return await handler(request)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    key = settings.api_key
    # /metrics is public only when metrics_public says so (a scraper without the API key).
    public = request.path in PUBLIC_PATHS or (
        settings.metrics_public and request.path == "/metrics"
    )
    if key and not public and request.method != "OPTIONS":
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), key.encode()
        ):
            raise auth_error()
    return await handler(request)


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare hook: also covers SSE responses, which are prepared early."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if REQUEST_ID in request:
        response.headers.setdefault("X-Request-Id", request[REQUEST_ID])


MIDDLEWARES = [request_id_middleware, error_middleware, body_limit_middleware, auth_middleware]
