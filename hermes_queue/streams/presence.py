"""Who reads a run, as Redis sees it: this API process's readers of each run it serves.

A turn started by a request that reads it (a chat completion, a session chat) leaves its
session blocked while it runs. When its client goes away for good (the user stopped reading:
a closed tab, a cancelled request) the turn has nobody left to show its reply to, and the next
turn on that session should not wait behind it (docs/compatibility.md, "Abandoned turns"). The
run scripts tell "abandoned" from "a reader is following" with this record: one sorted set per
run (``keys.readers``) of API process ids, each scored with the time until which it vouches
for a reader (ms, Redis clock). A process writes its entry when its first subscription to the
run opens (the request that starts a session run finds it written by the creating script, which
vouches until the renewals take over) and removes it when its last one closes before the run
ended (at once: that is what lets the next turn start without delay; an ended run's entry is
left to lapse), and renews the entries of every run it serves every few seconds, so the entries
of a process that died lapse by themselves.

Presence is advice, not a guarantee: a failed write is logged and the next renewal repairs it;
a reader is only ever absent for a moment (between a drop and its reconnect), and then a new
turn may supersede the run, which is the point.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from hermes_queue.keys import Keys
from hermes_queue.redisio.health import OutageLog

log = logging.getLogger(__name__)

# How long one entry vouches for a reader, and how often a process renews its entries: a
# process that died stops vouching within TTL_MS.
TTL_MS = 6_000
RENEW_SECONDS = 2.0

# Entry scored on Redis' clock (the scripts that read it compare with that clock too); the key
# lapses with its last entry.
_VOUCH = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
"""


def new_reader_id() -> str:
    """This process's name in the readers sets."""
    return "api-" + uuid.uuid4().hex[:12]


class ReaderPresence:
    """Counts this process's readers per run and keeps ``keys.readers`` in step with them.

    ``enter``/``leave`` never wait for Redis: the changes go out from one writer task, in the
    order they were made, so a leave followed by an enter of the same run ends present."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        reader_id: str | None = None,
        *,
        ttl_ms: int = TTL_MS,
        renew_seconds: float = RENEW_SECONDS,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.reader_id = reader_id or new_reader_id()
        self.ttl_ms = ttl_ms
        self._renew_seconds = renew_seconds
        self._vouch = redis.register_script(_VOUCH)
        self._counts: dict[str, int] = {}
        self._changes: dict[str, bool] = {}  # run id -> present, not written yet
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        # Changes made and written so far, and who waits for which to be written (flush).
        self._made = 0
        self._written = 0
        self._flushes: list[tuple[int, asyncio.Future[None]]] = []
        # Writes fail every renewal while Redis is away: logged once per outage.
        self._outage = OutageLog(log, "reader presence")

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._write_forever(), name="reader-presence")

    async def aclose(self) -> None:
        """Stop writing; the entries lapse within ``ttl_ms``."""
        self._closing = True  # also seen by a loop whose cancellation a Redis call swallowed
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._settle_flushes(self._made)

    async def flush(self) -> None:
        """Wait until every change made so far is written (or failed to be). A run script that
        judges readers runs after this in the same process, so a client that left before the
        request arrived no longer counts."""
        if self._written >= self._made or self._task is None or self._closing:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._flushes.append((self._made, waiter))
        await waiter

    def _settle_flushes(self, written: int) -> None:
        self._written = written
        waiting, self._flushes = self._flushes, []
        for target, waiter in waiting:
            if target > written:
                self._flushes.append((target, waiter))
            elif not waiter.done():
                waiter.set_result(None)

    def enter(self, run_id: str, *, written: bool = False) -> None:
        """A reader of ``run_id`` here. ``written``: its entry was just written by the script
        that created the run (it vouches for ``ttl_ms``; the renewals take over from there),
        so the first reader writes nothing, unless a change of that run is still pending."""
        count = self._counts.get(run_id, 0) + 1
        self._counts[run_id] = count
        if count == 1 and not (written and run_id not in self._changes):
            self._changed(run_id, True)

    def leave(self, run_id: str, *, ended: bool = False) -> None:
        """A reader of ``run_id`` here gone. ``ended``: it saw the run's terminal event. The
        entry of an ended run is read by nothing (an ended run is never "abandoned",
        ``lua/prelude.lua``), so it is not removed but left to lapse (``ttl_ms``): the session's
        next turn, whose request flushes the changes before it creates the run
        (``runs/start.py``), then waits for no removal, one round trip less per turn."""
        count = self._counts.get(run_id, 0) - 1
        if count > 0:
            self._counts[run_id] = count
            return
        self._counts.pop(run_id, None)
        if ended:
            self._changes.pop(run_id, None)  # an entry not written yet need not be
        else:
            self._changed(run_id, False)

    def reading(self, run_id: str) -> bool:
        return run_id in self._counts

    def _changed(self, run_id: str, present: bool) -> None:
        self._changes.pop(run_id, None)  # re-inserted last: written in the order made
        self._changes[run_id] = present
        self._made += 1
        self._wake.set()

    async def _write_forever(self) -> None:
        loop = asyncio.get_running_loop()
        next_renewal = loop.time() + self._renew_seconds
        while not self._closing:
            # A timer rings the same bell as a change (not asyncio.timeout around the wait: on
            # 3.11 a stop that lands as the timeout fires can be swallowed with it).
            renewal = loop.call_at(next_renewal, self._wake.set)
            try:
                await self._wake.wait()
            finally:
                renewal.cancel()
            self._wake.clear()
            if self._closing:
                return
            made, changes, self._changes = self._made, self._changes, {}
            if loop.time() >= next_renewal:
                next_renewal = loop.time() + self._renew_seconds
                changes = {**dict.fromkeys(self._counts, True), **changes}
            if changes:
                await self._write(changes)
            self._settle_flushes(made)

    async def _write(self, changes: dict[str, bool]) -> None:
        if self.keys.cluster:
            await self._write_each(changes)
            return
        try:
            try:
                await self._pipelined(changes)
            except NoScriptError:  # Redis lost its scripts (a restart, a failover): load it
                await self.redis.script_load(_VOUCH)
                await self._pipelined(changes)  # ZADD, PEXPIRE and ZREM: the same again
            self._outage.ok()
        except Exception as exc:  # advisory: the next renewal writes every present run again
            self._outage.failed(exc)

    async def _pipelined(self, changes: dict[str, bool]) -> None:
        # EVALSHA as a plain command: a redis-py pipeline that knows it runs a script first asks
        # SCRIPT EXISTS, one more round trip (and Redis command) on every write.
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id, present in changes.items():
                key = self.keys.readers(run_id)
                if present:
                    pipe.evalsha(self._vouch.sha, 1, key, self.reader_id, str(self.ttl_ms))
                else:
                    pipe.zrem(key, self.reader_id)
            await pipe.execute()

    async def _write_each(self, changes: dict[str, bool]) -> None:
        """On a cluster: a call per run, concurrently (a cluster pipeline takes no scripts
        but as raw commands, which do not load a script a node lacks)."""

        async def write(run_id: str, present: bool) -> None:
            key = self.keys.readers(run_id)
            if present:
                await self._vouch(keys=[key], args=[self.reader_id, self.ttl_ms])
            else:
                await self.redis.zrem(key, self.reader_id)

        results = await asyncio.gather(
            *(write(run_id, present) for run_id, present in changes.items()),
            return_exceptions=True,
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:  # advisory: the next renewal writes every present run again
            self._outage.failed(failed[0])
        else:
            self._outage.ok()


__all__ = ["TTL_MS", "ReaderPresence", "new_reader_id"]
