"""Steering a running turn across processes (upstream's ``POST /v1/runs/{id}/steer``): any API
replica accepts a steer, the worker running the turn applies it.

Upstream hands the text to the ``AIAgent`` in the memory of the process running it, so only
that process can steer the run, and a steer is lost with the process. Here a steer is part of
the run record (``lua/steer_prelude.lua`` names the fields), and every transition is one
script:

- ``steer`` (API, any replica): accepted only while the run is ``running``; the steer joins the
  run's pending steers and ``run.steered`` goes on its stream;
- the worker is handed the pending steers with every step it records (``append_step.lua``'s
  reply) and applies them at its agent's next tool-result boundary; the step carrying that
  application takes them off the pending list in the same fenced call, so a steer reaches the
  agent once, whichever attempt resumes the turn (``Attempt.append_step``);
- a completed run whose steers were never applied reports them as ``pending_steer`` (on
  ``run.completed`` and the run status: ``finish.lua``), which the session's next turn may take
  (``take``).

No message goes over the control channel: nothing in a worker waits for a steer, and reading
the pending steers with each recorded step means a steer accepted before a boundary is applied
there, with no race against a pub/sub message in flight.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from hermes_queue.config import RunSettings
from hermes_queue.keys import Keys
from hermes_queue.redisio.replication import acknowledged
from hermes_queue.runs.scripts import ScriptKeys, load_script
from hermes_queue.runs.scripts import decode as _decode

# Steers a run keeps pending at most: a client steering faster than its agent reaches a
# boundary is refused (``full``) rather than growing the record without bound.
MAX_PENDING_STEERS = 32


@dataclass(frozen=True)
class PendingSteer:
    """A steer accepted and not yet applied: its id (``st1``, ``st2``, …) and text."""

    id: str
    text: str


def decode_steers(raw: str) -> tuple[PendingSteer, ...]:
    """The record's ``steers_pending`` field ('' or absent: none)."""
    if not raw:
        return ()
    try:
        items = json.loads(raw)
    except ValueError:
        return ()
    if not isinstance(items, list):
        return ()
    return tuple(
        PendingSteer(str(item["id"]), str(item["text"]))
        for item in items
        if isinstance(item, dict) and "id" in item and "text" in item
    )


@dataclass(frozen=True)
class SteerOutcome:
    """``accepted`` (with the steer's id and its ``run.steered`` event id), ``missing`` (no
    such run), ``not_accepting`` (the run is not running: ``status`` says what it is) or
    ``full`` (too many steers pending)."""

    verdict: str
    status: str = ""
    steer_id: str = ""
    event_id: str = ""


class Steers:
    def __init__(self, redis: aioredis.Redis, settings: RunSettings, keys: Keys) -> None:
        self.settings = settings
        self._keys_of = ScriptKeys(keys)
        self._scripts: dict[str, AsyncScript] = {
            name: redis.register_script(load_script(name, "steer_prelude", sharded=keys.cluster))
            for name in ("steer", "take_steer")
        }
        # A steer a client is told was accepted waits for redis_min_replicas replicas.
        self._acked = acknowledged(self._scripts, settings.min_replicas, strict=("steer",))

    async def steer(self, run_id: str, text: str) -> SteerOutcome:
        """Add a steer to the run's pending steers (see the module docstring)."""
        settings = self.settings
        result: list[Any] = await self._acked["steer"](
            keys=self._keys_of.of_run("steer", run_id),
            args=[
                text,
                repr(time.time()),
                settings.stream_maxlen,
                settings.retention_seconds,
                MAX_PENDING_STEERS,
            ],
        )
        verdict = _decode(result[0])
        if verdict == "accepted":
            return SteerOutcome(verdict, "running", _decode(result[1]), _decode(result[2]))
        if verdict == "not_accepting":
            return SteerOutcome(verdict, _decode(result[1]))
        return SteerOutcome(verdict)

    async def take(self, run_id: str) -> str | None:
        """A completed run's ``pending_steer``, for the session's next turn: given once, None
        when there is none to take."""
        result = await self._scripts["take_steer"](
            keys=self._keys_of.of_run("take_steer", run_id), args=[]
        )
        return None if result is None else _decode(result)
