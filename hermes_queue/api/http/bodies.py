"""Reading a request body as one JSON object: within a time limit, decoded and checked once
(``json_body``), refused in the JSON envelope otherwise.

The time limit is the caller's (``body_timeout_seconds``): this module holds no settings, so
the typed bodies and their checks load without the process's state.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.json_body import BodyError, decode

INVALID_JSON = "Invalid JSON in request body"


def json_document(raw: bytes, invalid: str = INVALID_JSON) -> dict[str, Any]:
    """``raw`` as a JSON object (``json_body.decode``'s checks), or 400: ``invalid`` is the
    endpoint's wording (upstream's) for a body that is not JSON at all."""
    try:
        body = decode(raw) if raw else None
    except BodyError as exc:
        message = invalid if exc.syntax else exc.message
        raise ApiError(400, exc.code, message, param=exc.param) from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "Request body must be a JSON object")
    return body


async def read_body(request: web.Request, seconds: float) -> bytes:
    """The whole body, or 408 ``request_timeout`` (connection closed) when it does not arrive
    within ``seconds``: a client trickling its body holds nothing for long."""
    try:
        async with asyncio.timeout(seconds):
            return await request.read()
    except TimeoutError:
        raise ApiError(
            408,
            "request_timeout",
            f"The request body did not arrive within {seconds:g} s",
            close=True,
        ) from None


async def json_object(
    request: web.Request, seconds: float, invalid: str = INVALID_JSON
) -> dict[str, Any]:
    """The body as a JSON object, read within ``seconds``, or 400 ``invalid_json`` (see
    :func:`json_document`)."""
    return json_document(await read_body(request, seconds), invalid)
