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


# How the scripts publish (entries, wake-ups, stop requests); on a cluster, sharded.
_PUBLISH = "redis.call('PUBLISH',"
_SPUBLISH = "redis.call('SPUBLISH',"


def load_script(name: str, *preludes: str, sharded: bool = False) -> str:
    """The stream entry's writer (``streams/entry.lua``, beside its decoder), ``prelude.lua``
    (shared helpers), then any further preludes, then the script itself. ``sharded`` (a Redis
    Cluster, ``Keys.cluster``): every message (an entry on its stream's channel, a wake-up or
    a stop request on its shard's) goes out with ``SPUBLISH``, which only the node holding the
    channel's slot (and its replicas) relays, rather than ``PUBLISH``, which every node of a
    cluster relays, so the cost of a message stays on its shard."""
    folder = resources.files("hermes_queue.runs") / "lua"
    parts = ("prelude", *preludes, name)
    scripts = [(folder / f"{part}.lua").read_text(encoding="utf-8") for part in parts]
    text = "\n".join([ENTRY_WRITER, *scripts])
    if sharded:
        assert _PUBLISH in ENTRY_WRITER, "streams/entry.lua publishes as runs/scripts.py expects"
        text = text.replace(_PUBLISH, _SPUBLISH)
    return text


def current_stats_key(keys: Keys, run_id: str) -> str:
    """This minute's outcome counters of the run's shard (the claim, finish, stop and reap
    scripts feed them)."""
    return keys.stats_of(run_id, int(time.time() // 60))


def decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
