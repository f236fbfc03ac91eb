"""The Lua scripts of ``runs/lua`` as Redis sees them, the keys each is called with, and the
decoding of their replies.

Each script declares the keys it takes in its header, by role and in order (``-- KEYS: record,
events, leases``); :class:`ScriptKeys` reads those headers and names the keys of a run (or of a
shard) for the script asked for, so the order of ``KEYS[n]`` is written in one place, beside
the Lua that reads it, and no caller lists keys by hand.
"""

from __future__ import annotations

import functools
import re
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


def _script_text(name: str) -> str:
    return (resources.files("hermes_queue.runs") / "lua" / f"{name}.lua").read_text("utf-8")


def load_script(name: str, *preludes: str, sharded: bool = False) -> str:
    """The stream entry's writer (``streams/entry.lua``, beside its decoder), ``prelude.lua``
    (shared helpers), then any further preludes, then the script itself. ``sharded`` (a Redis
    Cluster, ``Keys.cluster``): every message (an entry on its stream's channel, a wake-up or
    a stop request on its shard's) goes out with ``SPUBLISH``, which only the node holding the
    channel's slot (and its replicas) relays, rather than ``PUBLISH``, which every node of a
    cluster relays, so the cost of a message stays on its shard."""
    scripts = [_script_text(part) for part in ("prelude", *preludes, name)]
    text = "\n".join([ENTRY_WRITER, *scripts])
    if sharded:
        assert _PUBLISH in ENTRY_WRITER, "streams/entry.lua publishes as runs/scripts.py expects"
        text = text.replace(_PUBLISH, _SPUBLISH)
    return text


_KEYS_HEADER = re.compile(r"^-- KEYS: ([a-z_, ]+)", re.MULTILINE)


@functools.cache
def declared_keys(name: str) -> tuple[str, ...]:
    """The roles of the keys script ``name`` takes, in order, from its ``-- KEYS:`` header."""
    found = _KEYS_HEADER.search(_script_text(name))
    if found is None:
        raise ValueError(f"runs/lua/{name}.lua declares no '-- KEYS:' header")
    return tuple(role.strip() for role in found.group(1).split(","))


class ScriptKeys:
    """The keys a run script is called with, by the roles its header declares. A run's own
    keys (``record``, ``events``, ``steps``, ``readers``) carry its shard's hash tag, as do
    its shard's (``queue``, ``turn_order``, ``fair``, ``held``: the prefix of its tenants'
    held sets, ``leases`` and ``leases_heard``, ``blocked``, ``failures``, ``stats``: this
    minute's counters) and, for a session run, its session's (``active``, ``pending``): so
    every call names one slot.
    The webhook scripts name their shard's (``webhook_outbox``, ``webhook_recent``,
    ``webhook_pending``, ``webhook_dead``) and one delivery's hash (``delivery``), all under
    the shard's tag too."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys

    def of_run(self, script: str, run_id: str, session_id: str | None = None) -> list[str]:
        """The keys of ``script`` for the run ``run_id`` (of the stored session
        ``session_id``, for the scripts that keep its one-turn-at-a-time rule)."""
        return [self._run_key(role, run_id, session_id) for role in declared_keys(script)]

    def of_shard(self, script: str, shard: int) -> list[str]:
        """The keys of a script that scans one shard (the reaper's, the abandoned-run scan,
        the webhook senders' claim and expansion)."""
        return [self._shard_key(role, shard) for role in declared_keys(script)]

    def of_delivery(self, script: str, shard: int, delivery_id: str) -> list[str]:
        """The keys of a script about one webhook delivery of ``shard``: its hash
        (``delivery``) beside its shard's webhook keys."""
        return [
            self.keys.webhook_delivery_at(shard, delivery_id)
            if role == "delivery"
            else self._shard_key(role, shard)
            for role in declared_keys(script)
        ]

    def _shard_key(self, role: str, shard: int) -> str:
        keys = self.keys
        named: dict[str, Callable[[int], str]] = {
            "leases": keys.leases_at,
            "leases_heard": keys.leases_heard_at,
            "blocked": keys.blocked_at,
            "queue": keys.queue_at,
            "turn_order": keys.turn_order_at,
            "fair": keys.fair_at,
            "held": keys.held_prefix_at,
            "webhook_outbox": keys.webhook_outbox_at,
            "webhook_recent": keys.webhook_recent_at,
            "webhook_pending": keys.webhook_pending_at,
            "webhook_dead": keys.webhook_dead_at,
            "reaper_lease": keys.reaper_lease_at,
        }
        return named[role](shard)

    def _run_key(self, role: str, run_id: str, session_id: str | None) -> str:
        keys = self.keys
        if role in ("active", "pending"):
            if session_id is None:
                raise ValueError(f"the {role!r} key of a run needs its session")
            return (
                keys.session_active(session_id)
                if role == "active"
                else (keys.session_pending(session_id))
            )
        if role == "stats":
            return current_stats_key(keys, run_id)
        named: dict[str, Callable[[str], str]] = {
            "record": keys.run,
            "events": keys.events,
            "steps": keys.steps,
            "readers": keys.readers,
            "queue": keys.queue_of,
            "turn_order": keys.turn_order_of,
            "fair": keys.fair_of,
            "held": keys.held_prefix_of,
            "leases": keys.leases_of,
            "leases_heard": keys.leases_heard_of,
            "blocked": keys.blocked_of,
            "failures": keys.failures_of,
        }
        return named[role](run_id)


def current_stats_key(keys: Keys, run_id: str) -> str:
    """This minute's outcome counters of the run's shard (the claim, finish, stop and reap
    scripts feed them)."""
    return keys.stats_of(run_id, int(time.time() // 60))


def decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
