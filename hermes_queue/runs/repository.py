"""Run records in Redis: creation (queued in the same step), reads, stop requests and the claim.

Every transition is one Lua script (``lua/``), so a run's record, stream, lease and queue entry
change together or not at all. Runs are started through ``start.py``, which calls ``create``
and ``create_session_run`` here. A claim returns an ``Attempt`` (``attempt.py``), which makes
every write of the worker that took the run, fenced by its attempt number. The repository's
collaborators: ``leases`` (renewal and reaping, ``leases.py``), ``approvals``
(``approvals.py``) and ``steers`` (``steers.py``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from hermes_queue.config import RunSettings
from hermes_queue.keys import Keys
from hermes_queue.redisio.replication import acknowledged
from hermes_queue.replies import ReplyText
from hermes_queue.runs.approvals import Approvals
from hermes_queue.runs.attempt import Attempt, FencedScripts, FinishTrace
from hermes_queue.runs.leases import Leases
from hermes_queue.runs.model import (
    QUEUE_WAIT_SECONDS,
    TERMINAL_STATUSES,
    NewRun,
    RunRecord,
    RunStatus,
)
from hermes_queue.runs.placement import RunPlacement
from hermes_queue.runs.scripts import Outcomes, ScriptKeys
from hermes_queue.runs.scripts import decode as _decode
from hermes_queue.runs.scripts import load_script as _load_script
from hermes_queue.runs.steers import Steers
from hermes_queue.streams.presence import TTL_MS as PRESENCE_TTL_MS
from hermes_queue.streams.reader import id_key, read_range
from hermes_queue.tenancy.keys import DEFAULT_TENANT

# Stream entries read per call where a worker reads its run's own stream.
_PAGE = 500


def _flat(fields: dict[str, str]) -> list[str]:
    return [item for pair in fields.items() for item in pair]


@dataclass(frozen=True)
class SessionAdmission:
    """``created`` (runs now), ``waiting`` (behind ``blocking_run_id``), ``busy`` (rejected)
    or ``exists`` (the run id was taken). ``abandoned``: the blocking run was started by a
    request that reads it and nobody reads it any more (streams/presence.py); the caller stops
    it, so the new run does not wait behind a reply nobody will see."""

    verdict: str
    blocking_run_id: str | None = None
    abandoned: bool = False


@dataclass(frozen=True)
class StopOutcome:
    found: bool
    status: str


class RunRepository:
    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        settings: RunSettings,
        on_finished: Outcomes | None = None,
        finish_trace: FinishTrace | None = None,
        subscribed: bool = False,
    ) -> None:
        """``finish_trace``: a traced worker's tracing, which records each terminal write.
        ``subscribed``: the deployment has webhook subscriptions (``webhook_subscriptions``),
        so every run it creates wants deliveries, not only those with a webhook of their own."""
        self.redis = redis
        self._subscribed = subscribed
        self.settings = settings
        self.keys = keys
        # Where runs live (their shard); a session run outside its session's is refused.
        self.placement = RunPlacement(keys, redis)
        self._keys_of = ScriptKeys(keys)
        self._on_finished: Outcomes = on_finished or (lambda _outcome: None)
        self._scripts: dict[str, AsyncScript] = {
            name: redis.register_script(_load_script(name, sharded=keys.cluster))
            for name in (
                "create",
                "create_session_run",
                "claim",
                "stop",
                "abandoned",
                "release_held",
            )
        }
        # tenant_max_running as the claim reads it ('' when none is set: nothing is held).
        self.running_limits = settings.limits.running_spec
        # Writes a client is told about wait for redis_min_replicas replicas
        # (redisio/replication.py). The creations recognise their own earlier send, so are
        # sent again after a failure that may have been applied (a switchover).
        self._acked = acknowledged(
            self._scripts,
            settings.min_replicas,
            strict=("create", "create_session_run", "stop"),
            resend=("create", "create_session_run"),
        )
        # The leases of running runs: renewed by lease keepers, settled by reapers.
        self.leases = Leases(redis, settings, self.keys, self._on_finished)
        # Approval requests and answers (their own module: runs/approvals.py).
        self.approvals = Approvals(redis, settings, self.keys)
        # Steers of running turns, and what a completed turn's steers left (runs/steers.py).
        self.steers = Steers(redis, settings, self.keys)
        # What the attempts this repository's claims return write through.
        self._fenced = FencedScripts(
            redis,
            settings,
            self.keys,
            self.approvals,
            self._on_finished,
            self._record_ttl,
            finish_trace,
        )

    async def aclose(self) -> None:
        """Close the append connection (the shared client is its owner's to close)."""
        await self._fenced.aclose()

    @property
    def _record_ttl(self) -> int:
        """A live record outlives the longest wait in the queue plus its retention."""
        return self.settings.retention_seconds + QUEUE_WAIT_SECONDS

    def _fields(self, run: NewRun) -> dict[str, str]:
        """The new record's fields; one that wants webhook deliveries names its shard's outbox,
        where the script that ends it queues them (``prelude.lua`` ``finish``)."""
        fields = run.fields()
        if run.webhook or self._subscribed:
            fields["webhook_outbox"] = self.keys.webhook_outbox_of(run.run_id)
        return fields

    # -- API side --------------------------------------------------------------------------
    # Creation is ``runs/start.py``'s to call: the one way a run is started.
    async def create(self, run: NewRun) -> bool:
        """Store the run and queue it atomically; False if the id is another run's. True
        also when an earlier send of this call created it and its reply was lost
        (``lua/create.lua``): the call is sent again after such a failure."""
        created = await self._acked["create"](
            keys=self._keys_of.of_run("create", run.run_id),
            args=[
                run.run_id,
                self._record_ttl,
                self.keys.wake_channel_of(run.run_id),
                run.tenant,
                repr(self.settings.weight_of(run.tenant)),
                *_flat(self._fields(run)),
            ],
        )
        return bool(created)

    async def create_session_run(
        self, run: NewRun, *, strategy: str, read_by: str | None = None
    ) -> SessionAdmission:
        """Create a run under the one-active-run-per-session rule (``reject`` or ``enqueue``).
        ``read_by``: the reader id (``ReaderPresence.reader_id``) of the API process whose
        request reads the run, which makes the run abandonable (``SessionAdmission``)."""
        run_id, session_id = run.run_id, run.session_id
        self.placement.require(run_id, session_id)
        result = await self._acked["create_session_run"](
            keys=self._keys_of.of_run("create_session_run", run_id, session_id),
            args=[
                run_id,
                self._record_ttl,
                self.keys.wake_channel_of(run_id),
                strategy,
                read_by or "",
                PRESENCE_TTL_MS,
                run.tenant,
                repr(self.settings.weight_of(run.tenant)),
                self.leases.quiet_ms,
                *_flat(self._fields(run)),
            ],
        )
        verdict = _decode(result[0])
        blocking = _decode(result[1]) if len(result) > 1 else None
        abandoned = len(result) > 2 and _decode(result[2]) == "abandoned"
        return SessionAdmission(verdict=verdict, blocking_run_id=blocking, abandoned=abandoned)

    async def supersede_abandoned(
        self, limit: int = 100, shards: Iterable[int] | None = None
    ) -> list[str]:
        """Stop the active session runs nobody reads any more that keep a parked run waiting
        (``lua/abandoned.lua``) in ``shards`` (None: every shard); their ids. Every reaper
        pass calls it; for a reader's entry after Redis was away, it stops none."""
        stopped: list[str] = []
        for shard in self.keys.shard_ids if shards is None else shards:
            found = await self._scripts["abandoned"](
                keys=self._keys_of.of_shard("abandoned", shard),
                args=[limit, self.leases.quiet_ms],
            )
            stopped += [_decode(run_id) for run_id in found]
        for run_id in stopped:
            await self.request_stop(run_id)
        return stopped

    async def release_held(self, shards: Iterable[int] | None = None) -> int:
        """Move back into the turn order the held runs of every tenant with room under its
        running limit now (``lua/release_held.lua``: the backstop behind the claim's holds, and
        what frees them once a limit is raised or removed) in ``shards`` (None: every shard);
        how many it moved. Reapers call it on their first pass, then each pass while running
        limits are set."""
        moved = 0
        for shard in self.keys.shard_ids if shards is None else shards:
            moved += await self._scripts["release_held"](
                keys=self._keys_of.of_shard("release_held", shard),
                args=[self.running_limits, self.keys.wake_channel_at(shard)],
            )
        return moved

    async def session_runs(self, session_id: str) -> tuple[str | None, list[str]]:
        """The session's active run id and the run ids waiting behind it, in order."""
        active_key = await self.redis.get(self.keys.session_active(session_id))
        # redis-py types asyncio commands as "awaitable or value"; these are awaitables.
        pending_key = self.keys.session_pending(session_id)
        pending = await cast("Awaitable[list[bytes]]", self.redis.lrange(pending_key, 0, -1))

        async def live(record_key: bytes) -> str | None:
            fields = self.redis.hmget(_decode(record_key), ["run_id", "status"])
            run_id, status = await cast("Awaitable[list[bytes | None]]", fields)
            if run_id is None or status is None or _decode(status) in TERMINAL_STATUSES:
                return None
            return _decode(run_id)

        active = await live(active_key) if active_key else None
        waiting = [run_id for run_id in [await live(key) for key in pending] if run_id]
        return active, waiting

    async def steps(self, run_id: str) -> list[dict[str, Any]]:
        """The run's recorded steps, oldest first (``append_step.lua``'s records: ``after``,
        the event id each follows; ``attempt``; ``step``, what the backend recorded)."""
        key = self.keys.steps(run_id)
        raw = await cast("Awaitable[list[bytes]]", self.redis.lrange(key, 0, -1))
        return [json.loads(item) for item in raw]

    async def text_after(self, run_id: str, after: str | None, through: str | None = None) -> str:
        """The reply text the run's stream holds after event ``after`` (None: from its start),
        up to event ``through`` (None: its end), less what a later attempt superseded
        (``replies.ReplyText``): what its readers were shown there that still stands."""
        reply = ReplyText()
        last = id_key(through) if through else None
        while True:
            events = await read_range(self.redis, self.keys, run_id, after, _PAGE)
            for event in events:
                if last is not None and id_key(event.id) > last:
                    return reply.text
                reply.add(event)
            if len(events) < _PAGE:
                return reply.text
            after = events[-1].id

    async def get(self, run_id: str) -> RunRecord | None:
        raw = await cast("Awaitable[dict[bytes, bytes]]", self.redis.hgetall(self.keys.run(run_id)))
        return RunRecord.from_hash(raw) if raw else None

    async def owner(self, run_id: str) -> str | None:
        """The tenant that owns the run (one field of its record), None when there is none."""
        run_field, tenant = await cast(
            "Awaitable[list[bytes | None]]",
            self.redis.hmget(self.keys.run(run_id), ["run_id", "tenant"]),
        )
        if run_field is None:
            return None
        return tenant.decode() if tenant else DEFAULT_TENANT

    async def request_stop(self, run_id: str) -> StopOutcome:
        result = await self._acked["stop"](
            keys=self._keys_of.of_run("stop", run_id),
            args=[
                run_id,
                repr(time.time()),
                self.settings.retention_seconds,
                self.settings.stream_maxlen,
                self.keys.control_channel_of(run_id),
            ],
        )
        verdict = _decode(result[0])
        if verdict == "missing":
            return StopOutcome(found=False, status="")
        if verdict == "cancelled":
            self._on_finished(RunStatus.CANCELLED)
        return StopOutcome(found=True, status=_decode(result[1]))

    # -- worker side -----------------------------------------------------------------------
    async def claim(self, run_id: str, worker_id: str) -> Attempt | None:
        """Take a run from the queue; None when another worker took it first, or its entry was
        stale (the run is finished, gone or held by a live attempt: the entry is dropped)."""
        result = await self._scripts["claim"](
            keys=self._keys_of.of_run("claim", run_id),
            args=[
                run_id,
                worker_id,
                int(self.settings.lease_seconds * 1000),
                repr(time.time()),
                self._record_ttl,
                self.running_limits,
                self.keys.wake_channel_of(run_id),
                self.leases.quiet_ms,
            ],
        )
        if _decode(result[0]) != "claimed":
            return None
        flat = result[1:]
        raw = {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}
        return Attempt(self._fenced, RunRecord.from_hash(raw))
