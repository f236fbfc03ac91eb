"""True/false in text, one table for the whole project: settings, request bodies, query strings.

Upstream Hermes accepts ``1/true/yes/on`` and ``0/false/no/off`` (any case, surrounding blanks
ignored) wherever a client or an operator writes a boolean as text; every parser here agrees.
"""

from __future__ import annotations

from typing import Any

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def parse_bool(text: str) -> bool | None:
    """The boolean ``text`` spells, or None when it spells neither (the caller decides)."""
    lowered = text.strip().lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    return None


def coerce_bool(value: Any, default: bool = False) -> bool:
    """Upstream's lenient booleans: bools, numbers, and the words above; anything else (absent,
    unrecognised, another type) is ``default``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return bool(value)
    if isinstance(value, str):
        parsed = parse_bool(value)
        if parsed is not None:
            return parsed
    return default
