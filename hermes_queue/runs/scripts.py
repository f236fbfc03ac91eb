"""The Lua scripts of ``runs/lua`` as Redis sees them, and the decoding of their replies."""

from __future__ import annotations

from importlib import resources
from typing import Any


def load_script(name: str, *preludes: str) -> str:
    """``prelude.lua`` (shared helpers), then any further preludes, then the script itself."""
    folder = resources.files("hermes_queue.runs") / "lua"
    parts = ("prelude", *preludes, name)
    return "\n".join((folder / f"{part}.lua").read_text(encoding="utf-8") for part in parts)


def decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
