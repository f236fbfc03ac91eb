"""Knowing at once that a client closed its connection.

aiohttp (without ``handler_cancellation``, which would cut every handler short, writes
included) only lets a handler notice a closed connection when it next writes: an SSE stream
waiting for a run's next event would hold on to the run for up to a keepalive period. The API's
connection handlers (``server.JsonErrorHandler``) are :class:`ClientGoneHandler` s, which call
back whoever asked as soon as the connection is lost, so a stream ends at once and the run's
readers are counted right (a turn nobody reads is superseded by the next:
``streams/presence.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from aiohttp import web


class ClientGoneHandler(web.RequestHandler):
    """A connection handler that runs the callbacks registered on it when its client's
    connection closes."""

    __slots__ = ("_gone_callbacks",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._gone_callbacks: list[Callable[[], None]] = []

    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)
        callbacks, self._gone_callbacks = self._gone_callbacks, []
        for callback in callbacks:
            callback()


def on_client_gone(request: web.BaseRequest, callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback`` as soon as the client's connection closes; returns its cancellation.
    Under another connection handler (aiohttp's test server, which cancels handlers instead)
    nothing is registered."""
    handler = request.protocol
    if not isinstance(handler, ClientGoneHandler):
        return _nothing
    if handler.transport is None or handler.transport.is_closing():
        callback()
        return _nothing
    handler._gone_callbacks.append(callback)

    def cancel() -> None:
        with contextlib.suppress(ValueError):
            handler._gone_callbacks.remove(callback)

    return cancel


def _nothing() -> None:
    return None
