"""The Lua scripts of ``runs/lua`` as Redis sees them, and the decoding of their replies."""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib import resources
from typing import Any

from hermes_queue.keys import Keys
from hermes_queue.streams.codec import ENTRY_WRITER

# Told the status of every run a script of this process ended (completed, failed, cancelled):
# the metrics hook. Each run ends in exactly one script call, so summed over processes it
# counts each run once, whichever process (worker, reaper, API stop) ended it.
Outcomes = Callable[[str], None]


def load_script(name: str, *preludes: str) -> str:
    """The stream entry's writer (``streams/entry.lua``, beside its decoder), ``prelude.lua``
    (shared helpers), then any further preludes, then the script itself."""
    folder = resources.files("hermes_queue.runs") / "lua"
    parts = ("prelude", *preludes, name)
    scripts = [(folder / f"{part}.lua").read_text(encoding="utf-8") for part in parts]
    return "\n".join([ENTRY_WRITER, *scripts])


def current_stats_key(keys: Keys) -> str:
    """This minute's outcome counters (the claim, finish, stop and reap scripts feed them)."""
    return keys.stats(int(time.time() // 60))


def decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
