"""The HTTP server around the app: aiohttp's own refusals in our JSON envelope, and idle
connections closed.

aiohttp answers some requests before any middleware runs: those its HTTP parser rejects
(non-ASCII bytes in the path, a request line over 8,190 bytes, ``GET *``, a bad
``Content-Length``) get a plain-text 400 from ``RequestHandler.handle_error``, the one method
every answer aiohttp makes itself goes through (its 500 and 504 too). aiohttp has no public
hook for these (aio-libs/aiohttp#3287 asks for one and is open), so :class:`ApiRunner` has its
server build connection handlers of a subclass that overrides ``handle_error``. That leans on
two things aiohttp does not promise: that ``Server.__call__`` builds a ``RequestHandler`` from
the server's ``_loop`` and ``_kwargs``, and that ``AppRunner._make_server`` returns a plain
``web.Server``. It was chosen over the alternatives (a custom request class whose private
``_prepare_hook`` rewrites the body, or patching ``RequestHandler`` for the whole process)
because it overrides one method by its public name and touches nothing global.
``tests/api/test_protocol_errors.py`` sends each malformed request over a raw socket, so an
aiohttp upgrade that moves these parts fails there rather than in production.

Idle connections: aiohttp closes a connection that is waiting for a request (a new one, or a
kept-alive one between requests) once ``keepalive_timeout`` has passed since it connected or
its last response, and request headers that are still arriving then count as waiting, so one
setting (``idle_timeout_seconds``) bounds both. A request being handled is never closed by it,
so SSE responses stream on. A body trickled in is bounded where it is read
(``http.bodies.read_body``: 408, and the connection closed).
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import http_exceptions, web

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.client_gone import ClientGoneHandler
from hermes_queue.api.middlewares import SECURITY_HEADERS
from hermes_queue.config import ApiSettings

log = logging.getLogger(__name__)

LINGERING_SECONDS = 10.0  # aiohttp's default


def protocol_error(status: int, exc: BaseException | None) -> ApiError:
    """The envelope for an answer aiohttp makes itself (parser refusal, 500, 504)."""
    if status == 504:
        return ApiError(504, "timeout", "The request took too long to handle")
    if status >= 500:
        return ApiError(status, "internal_error", "Internal server error")
    if isinstance(exc, http_exceptions.LineTooLong):
        return ApiError(status, "request_too_large", "Request line or a header is too long")
    reason = getattr(exc, "message", "") or ""
    if "content-length" in str(reason).lower():
        return ApiError(status, "invalid_content_length", "Invalid Content-Length header")
    return ApiError(status, "invalid_http_request", "Malformed HTTP request")


class JsonErrorHandler(ClientGoneHandler):
    """A connection handler whose own error answers are our JSON envelope, and which tells
    whoever asked when its client's connection closes (``client_gone.on_client_gone``)."""

    __slots__ = ()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            # aiohttp's version logs the traceback and refuses when a response has already
            # started (raises); only the body it builds is replaced.
            super().handle_error(request, status, exc, message)
        else:
            # A malformed request is the client's fault: one line, no traceback.
            log.info("refused a malformed request from %s: %s", request.remote, exc)
            if request.writer.output_size > 0:
                raise ConnectionError("a response was already sent")
        response = protocol_error(status, exc).response()
        response.headers.update(SECURITY_HEADERS)
        response.force_close()
        return response


class _JsonErrorServer(web.Server):
    def __call__(self) -> web.RequestHandler:
        return JsonErrorHandler(self, loop=self._loop, **self._kwargs)


class ApiRunner(web.AppRunner):
    """``web.AppRunner`` whose server answers in JSON even before the app sees a request."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        if type(server) is not web.Server:  # pragma: no cover - a changed aiohttp
            raise RuntimeError(f"unexpected aiohttp server {type(server).__name__}")
        server.__class__ = _JsonErrorServer
        return server


def api_runner(app: web.Application, settings: ApiSettings, **kwargs: Any) -> ApiRunner:
    """The runner every API process serves its app with (``cli/serve.py``, tests)."""
    return ApiRunner(
        app,
        handle_signals=False,
        access_log=None,
        keepalive_timeout=settings.idle_timeout_seconds,
        # After an answer that left a body unread (a 408, a refusal), aiohttp reads on for this
        # long before it closes: no longer than a body may take to arrive.
        lingering_time=min(LINGERING_SECONDS, settings.body_timeout_seconds),
        **kwargs,
    )
