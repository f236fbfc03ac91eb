"""Request parsing shared by every endpoint: JSON bodies, ids, messages. Errors are ApiErrors."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from aiohttp import web

from hermes_queue.api.errors import ApiError
from hermes_queue.api.json_body import BodyError, decode
from hermes_queue.api.state import STATE
from hermes_queue.config import Settings

MAX_ID_LENGTH = 256
_UNSAFE_ID = re.compile(r"[\x00-\x1f\x7f/\\\ud800-\udfff]|^\.\.?$")
_SURROGATES = re.compile("[\ud800-\udfff]")
MESSAGE_ROLES = frozenset({"system", "user", "assistant", "tool"})


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


async def read_body(request: web.Request) -> bytes:
    """The whole body, or 408 ``request_timeout`` (connection closed) when it does not arrive
    within ``body_timeout_seconds``: a client trickling its body holds nothing for long."""
    limit = request.app[STATE].settings.body_timeout_seconds
    try:
        async with asyncio.timeout(limit):
            return await request.read()
    except TimeoutError:
        raise ApiError(
            408,
            "request_timeout",
            f"The request body did not arrive within {limit:g} s",
            close=True,
        ) from None


async def json_object(request: web.Request, invalid: str = INVALID_JSON) -> dict[str, Any]:
    """The body as a JSON object, or 400 ``invalid_json`` (see :func:`json_document`)."""
    return json_document(await read_body(request), invalid)


def header_text(value: str) -> bool:
    """Whether a header value is text: aiohttp decodes header bytes that are not UTF-8 with
    ``surrogateescape``, and such a value cannot be stored, hashed or echoed."""
    return value.isascii() or not _SURROGATES.search(value)


def session_id_value(value: Any, *, param: str = "session_id") -> str:
    if not isinstance(value, str) or not value.strip():
        raise ApiError(400, "invalid_session_id", "Invalid session ID", param=param)
    if len(value) > MAX_ID_LENGTH:
        raise ApiError(400, "invalid_session_id", "Session ID too long", param=param)
    if _UNSAFE_ID.search(value):
        raise ApiError(400, "invalid_session_id", "Invalid session ID", param=param)
    return value


def optional_string(
    body: dict[str, Any], name: str, code: str, max_length: int = 1_000_000
) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > max_length:
        raise ApiError(400, code, f"'{name}' must be a string", param=name)
    return value


def optional_text(body: dict[str, Any], name: str, code: str) -> str | None:
    """Upstream's session-API wording ("title must be a string")."""
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise ApiError(400, code, f"{name} must be a string", param=name)
    return value


def _content(value: Any, param: str) -> str | list[Any]:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(part, dict) for part in value):
        return value
    raise ApiError(
        400,
        "invalid_content_part",
        "Message content must be a string or a list of parts",
        param=param,
    )


def message_list(value: Any, param: str, *, need_content: bool = False) -> list[dict[str, Any]]:
    """A list of ``{role, content}`` messages, validated before anything is allocated.

    ``need_content``: every entry must carry ``content`` (upstream's rule for
    ``conversation_history``; in ``input`` a message without it is empty)."""
    if not isinstance(value, list):
        raise ApiError(
            400,
            "invalid_messages",
            f"'{param}' must be an array of message objects",
            param=param,
        )
    out: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        where = f"{param}[{index}]"
        if (
            not isinstance(item, dict)
            or "role" not in item
            or (need_content and "content" not in item)
        ):
            fields = "'role' and 'content' fields" if need_content else "a 'role' field"
            raise ApiError(400, "invalid_messages", f"{where} must have {fields}", param=where)
        role = item["role"]
        if not isinstance(role, str) or role not in MESSAGE_ROLES:
            raise ApiError(
                400,
                "invalid_messages",
                f"{where} must be an object with a role of {sorted(MESSAGE_ROLES)}",
                param=where,
            )
        message = {"role": role, "content": _content(item.get("content", ""), f"{where}.content")}
        for extra in ("tool_calls", "tool_call_id", "name"):
            if extra in item:
                message[extra] = item[extra]
        out.append(message)
    return out


def is_empty(content: str | list[Any]) -> bool:
    return not content.strip() if isinstance(content, str) else len(content) == 0


def session_key_header(request: web.Request, settings: Settings) -> str | None:
    """``X-Hermes-Session-Key`` as upstream checks it (upstream-api.md §1.2): only with an API
    key."""
    value = request.headers.get("X-Hermes-Session-Key")
    if value is None:
        return None
    if not settings.api_key:
        raise ApiError(
            403,
            None,
            "X-Hermes-Session-Key requires API key authentication. "
            "Configure API_SERVER_KEY to enable this feature.",
        )
    if any(char in value for char in "\r\n\x00") or not header_text(value):
        raise ApiError(400, "invalid_session_key", "Invalid session key")
    if len(value) > MAX_ID_LENGTH:
        raise ApiError(400, "invalid_session_key", "Session key too long")
    return value
