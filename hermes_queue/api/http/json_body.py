"""Request bodies as JSON that every later step can store, hash and send on.

``json.loads`` accepts documents that are valid JSON but that nothing after it can handle: a
lone UTF-16 surrogate escape (``"\\ud800"``) becomes a Python string that cannot be encoded as
UTF-8, so writing it to Redis or SQL, or hashing it, raises; ``NaN``, ``Infinity`` and integers
beyond 64 bits have no place in a SQL column or another language's parser; a NUL character is
refused by PostgreSQL's text columns; and a document nested about a thousand levels deep raises
``RecursionError`` in the decoder itself. Every body is checked here once, right after decoding,
so such input is refused with a 400 naming where it is and never gets past the API.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 64
"""Arrays and objects nested deeper than this are refused (no request of this API needs more)."""
MAX_INTEGER = 2**63 - 1
"""Integers are bounded to what a 64-bit column holds."""

_UNSAFE_TEXT = re.compile("[\x00\ud800-\udfff]")


class BodyError(ValueError):
    """The body is not JSON this API accepts. ``param`` is the path of the offending value."""

    def __init__(
        self,
        message: str,
        param: str | None = None,
        code: str = "invalid_json",
        *,
        syntax: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        # Not JSON at all: each endpoint words that refusal as upstream does.
        self.syntax = syntax


def _no_constant(name: str) -> Any:
    raise BodyError(f"{name} is not a JSON number")


def decode(raw: bytes) -> Any:
    """The JSON document in ``raw`` (UTF-8, or UTF-16/32 with JSON's detection), checked by
    :func:`check`. Raises :class:`BodyError`."""
    try:
        document = json.loads(raw, parse_constant=_no_constant)
    except BodyError:
        raise
    except RecursionError:
        raise BodyError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError):  # JSONDecodeError, bad bytes, a huge integer
        raise BodyError("Invalid JSON", syntax=True) from None
    check(document)
    return document


def _path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def _check_text(text: str, where: str) -> None:
    if text.isascii() and "\x00" not in text:
        return
    found = _UNSAFE_TEXT.search(text)
    if found is None:
        return
    if found.group() == "\x00":
        raise BodyError(
            "Text must not contain NUL characters (\\u0000)", where or None, "invalid_text"
        )
    raise BodyError(
        f"Text must be valid Unicode: a lone UTF-16 surrogate (\\u{ord(found.group()):04x}) "
        "cannot be stored",
        where or None,
        "invalid_text",
    )


def _check_number(value: int | float, where: str) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if abs(value) > MAX_INTEGER:
            raise BodyError(
                "Integer out of range (at most 64 bits)", where or None, "number_out_of_range"
            )
    elif not math.isfinite(value):
        raise BodyError("Number out of range", where or None, "number_out_of_range")


def check(document: Any) -> None:
    """Refuse what :mod:`json` decodes but no later step can handle (see the module doc)."""
    stack: list[tuple[Any, str, int]] = [(document, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, str):
            _check_text(value, where)
        elif isinstance(value, int | float):
            _check_number(value, where)
        elif isinstance(value, dict | list):
            if depth >= MAX_DEPTH:
                raise BodyError(f"JSON nested deeper than {MAX_DEPTH} levels", where or None)
            items = value.items() if isinstance(value, dict) else enumerate(value)
            # Reversed, so the first offending value in document order is the one reported.
            for key, item in reversed(list(items)):
                if isinstance(key, str):
                    _check_text(key, where)
                stack.append((item, _path(where, key), depth + 1))
