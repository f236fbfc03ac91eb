"""Approval requests across processes (upstream-api.md §4.3): the worker asks, any API replica
answers.

Upstream keeps pending approvals in the memory of the process running the agent, so only that
process can resolve them. Here the pending requests and their answers live in the run record
(``lua/approval_prelude.lua`` names the fields) and every transition is one script:

- ``request`` (worker, fenced): append ``approval.request``, status ``waiting_for_approval``;
- ``answer`` (API, any replica): record the choice, append ``approval.responded``, status back
  to ``running`` once nothing is pending, and tell the worker over the control channel with
  ``approval:<run_id>`` (stop requests there are the bare run id);
- ``settle`` (worker, fenced): nobody answered in time, so the request is denied.

The worker never depends on the pub/sub message alone: it re-reads the answer every heartbeat.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from hermes_queue.config import RunSettings
from hermes_queue.events import APPROVAL_CHOICES
from hermes_queue.keys import Keys
from hermes_queue.redisio.replication import acknowledged
from hermes_queue.runs.scripts import ScriptKeys, load_script
from hermes_queue.runs.scripts import decode as _decode
from hermes_queue.streams.codec import encode_data

# Control-channel message prefix of an answer; anything without it is a stop request.
APPROVAL_MESSAGE_PREFIX = "approval:"
# Upstream's aliases for a one-time approval.
CHOICE_ALIASES = {"approve": "once", "approved": "once", "allow": "once"}


def normalize_choice(value: object) -> str | None:
    """One of once/session/always/deny (case and blanks ignored, aliases folded), or None: the
    one reading of an answer, for ``POST /v1/runs/{id}/approval`` and ``runs approve`` alike."""
    text = value.strip().lower() if isinstance(value, str) else ""
    choice = CHOICE_ALIASES.get(text, text)
    return choice if choice in APPROVAL_CHOICES else None


def approval_message(run_id: str) -> str:
    return APPROVAL_MESSAGE_PREFIX + run_id


def _load(name: str, sharded: bool) -> str:
    return load_script(name, "approval_prelude", sharded=sharded)


@dataclass(frozen=True)
class AnswerOutcome:
    """``answered`` (with the resolved request ids, oldest first), ``missing`` (no such run),
    ``not_active`` (nothing pending) or ``not_pending`` (the named request is not pending)."""

    verdict: str
    request_ids: tuple[str, ...] = ()


class Approvals:
    def __init__(self, redis: aioredis.Redis, settings: RunSettings, keys: Keys) -> None:
        self.redis = redis
        self.settings = settings
        self.keys = keys
        self._keys_of = ScriptKeys(keys)
        self._scripts: dict[str, AsyncScript] = {
            name: redis.register_script(_load(name, keys.cluster))
            for name in ("request_approval", "answer_approval", "settle_approval")
        }
        self._acked = acknowledged(
            self._scripts, settings.min_replicas, strict=("answer_approval",)
        )

    def _fenced_args(self, attempt: int, request_id: str) -> list[Any]:
        """The arguments every worker-side (attempt-fenced) approval script starts with."""
        return [
            attempt,
            self.settings.stream_maxlen,
            self.settings.retention_seconds,
            repr(time.time()),
            request_id,
        ]

    # -- worker side -----------------------------------------------------------------------
    async def request(
        self, run_id: str, attempt: int, request_id: str, data: dict[str, Any]
    ) -> str | None:
        """Fenced: ``waiting`` or ``stopping``; None when this attempt no longer owns the run.
        Retrying with the same ``request_id`` after a lost reply never asks twice."""
        result = await self._scripts["request_approval"](
            keys=self._keys_of.of_run("request_approval", run_id),
            args=[*self._fenced_args(attempt, request_id), encode_data(data)],
        )
        return None if result is None else _decode(result[0])

    async def choice(self, run_id: str, request_id: str) -> str | None:
        """The recorded answer, if any (the worker's poll; one HGET)."""
        # redis-py types asyncio commands as "awaitable or value"; these are awaitables.
        value = await cast(
            "Awaitable[bytes | None]",
            self.redis.hget(self.keys.run(run_id), f"choice:{request_id}"),
        )
        return None if value is None else _decode(value)

    async def settle(self, run_id: str, attempt: int, request_id: str) -> tuple[str, str] | None:
        """Time out one request: ``("timed_out", "deny")``, or ``("answered", choice)`` when an
        answer won the race; None when this attempt no longer owns the run."""
        result = await self._scripts["settle_approval"](
            keys=self._keys_of.of_run("settle_approval", run_id),
            args=self._fenced_args(attempt, request_id),
        )
        if result is None:
            return None
        return _decode(result[0]), _decode(result[1])

    # -- API side --------------------------------------------------------------------------
    async def answer(
        self, run_id: str, choice: str, *, resolve_all: bool = False, request_id: str = ""
    ) -> AnswerOutcome:
        result = await self._acked["answer_approval"](
            keys=self._keys_of.of_run("answer_approval", run_id),
            args=[
                choice,
                "1" if resolve_all else "0",
                request_id,
                repr(time.time()),
                self.settings.stream_maxlen,
                self.settings.retention_seconds,
                self.keys.control_channel_of(run_id),
                approval_message(run_id),
            ],
        )
        verdict = _decode(result[0])
        return AnswerOutcome(verdict, tuple(_decode(item) for item in result[1:]))
