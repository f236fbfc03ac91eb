"""Renews the leases of this worker's runs from a thread of its own, and keeps its entry in the
worker registry (``keys.workers``, ``keys.worker``).

Agent code runs on the worker's event loop (and the Hermes backend in executor threads). A
synchronous call or a CPU-bound stretch there would starve an asyncio heartbeat, and the run
would be reaped as lost while it is in fact alive. So while the worker holds runs, a plain
thread with its own synchronous Redis connection beats every ``heartbeat_seconds`` as long as
the process lives; when the process dies or freezes, the lease lapses within
``lease_seconds`` and the reaper takes over. Each beat is one pipelined round trip (one per
node on a cluster): a renewal per run (which also reports a pending stop request, so a missed
pub/sub message only delays a stop by one beat) plus the registry entry.

While the worker holds no run there is nothing a blocked loop could starve: the registry entry
(presence only: no run is judged by it) is written from the event loop on the process's own
pooled client, and the thread holds no connection, so an idle worker costs Redis its pool and
its listener, nothing more. The hand-over, both ways, is decided under one lock:

* ``track`` (the event loop, right after a claim) marks the thread as renewing and wakes it:
  it connects (again) and renews at once, then every heartbeat, from its own connection. The
  claim set the lease a full ``lease_seconds`` ahead, so nothing is due before that first beat.
* The thread keeps renewing (the registry alone once the last run ended) until it has had
  nothing to renew for ``linger_seconds``; then it drops its connections (the client, and its
  cluster slot table, are kept for the next run) and the event loop writes the entry again.
  A run tracked meanwhile finds the thread renewing, or wakes it.

The keeper also knows, without asking Redis, when a run's lease is surely still held
(``surely_held``): the reaper acts on a run only once its lease deadline passed (``reap.lua``),
and every renewal that landed set that deadline ``lease_seconds`` after it was sent. So until
then, less a margin of two heartbeats, no other attempt can own the run, and a write that an
attempt must only make while it holds the run (the reply into the session's transcript) needs
no fenced round trip first; a process that froze past that time finds out it may not hold the
run any longer and asks Redis. What the margin assumes: a failover loses at most a heartbeat's
renewals, and the Redis hosts' clocks agree within a heartbeat (a deadline set by one primary's
clock is judged by its successor's); the process's own pauses are counted by two clocks
(``Instant``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio as aioredis
import redis.cluster
from redis.exceptions import NoScriptError, RedisClusterException

from hermes_queue.config import RedisSettings
from hermes_queue.redisio.connect import connect_sync
from hermes_queue.redisio.health import UNREACHABLE, OutageLog
from hermes_queue.redisio.redirections import moved
from hermes_queue.runs.attempt import Attempt
from hermes_queue.runs.leases import Leases
from hermes_queue.workers.lease_clock import Instant, lease_clock

log = logging.getLogger(__name__)

LEASE_LOST = -1
STOP_REQUESTED = 1


class RenewalsRefused(redis.RedisError):
    """Redis refused some renewals of a beat (the others went through)."""


# How long the thread keeps its connection once it has nothing left to renew: a worker taking
# runs now and then does not reconnect for each, and an idle one holds none (as its pool's
# surplus is trimmed, redisio.cluster.TRIM_SECONDS).
LINGER_SECONDS = 30.0
# How many heartbeats short of its lease a renewal counts as surely held: one for a renewal that
# a failover lost (a promoted replica may not have it), one for the clocks and the thread's
# scheduling. lease_seconds > 2 heartbeats (config/groups.py), so some time is always left.
HELD_MARGIN_BEATS = 2


class LeaseKeeper:
    def __init__(
        self,
        redis_settings: RedisSettings,
        leases: Leases,
        worker_id: str,
        loop: asyncio.AbstractEventLoop,
        on_signal: Callable[[str, int], None],
        slots: int,
        *,
        presence: aioredis.Redis,
        metrics_port: int | None = None,
        linger_seconds: float | None = None,
    ) -> None:
        # Its timings are the leases' (lease_seconds, heartbeat_seconds), as are the keys.
        self.settings = leases.settings
        self.leases = leases
        self.worker_id = worker_id
        self.keys = leases.keys
        self._redis_settings = redis_settings
        self._loop = loop
        self._on_signal = on_signal
        self._presence_redis = presence  # the event loop's client: the idle registry entry
        self._linger = LINGER_SECONDS if linger_seconds is None else linger_seconds
        # Which port of the metrics range this worker got: the registry tells operators.
        self._record: dict[str, int] = {"slots": slots}
        if metrics_port:
            self._record["metrics_port"] = metrics_port
        self._runs: dict[str, int] = {}
        # Under _lock: per run tracked (its attempt is _runs'), when the last renewal of its lease
        # that landed (or its claim) was sent, by lease_clock().
        self._renewed: dict[str, Instant] = {}
        self._lock = threading.Lock()
        # Under _lock: whether the thread renews (and writes the registry entry), and when it
        # last had a run to renew.
        self._renewing = False
        self._busy_at = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        # The thread's client: made at its first run, its connections dropped when idle.
        self._client: Any = None
        self._renew: Any = None
        # On a cluster: the nodes whose renewals failed on the last beat (_renew_per_node).
        self._failed_nodes: set[str] = set()
        self._thread = threading.Thread(target=self._loop_forever, name="lease-keeper", daemon=True)
        self._presence: asyncio.Task[None] | None = None

    @property
    def renewing(self) -> bool:
        """Whether the thread renews now (holding its own connection)."""
        with self._lock:
            return self._renewing

    def start(self) -> None:
        """Start the thread and, on the event loop, the idle registry entry."""
        self._thread.start()
        self._presence = self._loop.create_task(self._presence_forever(), name="presence")

    async def aclose(self) -> None:
        """Stop both, then remove this worker from the registry."""
        if self._presence is not None:
            self._presence.cancel()
            await asyncio.gather(self._presence, return_exceptions=True)
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join, self.settings.heartbeat_seconds * 4)
        try:
            async with self._presence_redis.pipeline(transaction=False) as pipe:
                pipe.zrem(self.keys.workers, self.worker_id)
                pipe.delete(self.keys.worker(self.worker_id))
                await pipe.execute()
        except (redis.RedisError, *UNREACHABLE):
            log.warning("could not remove worker %s from the registry", self.worker_id)
        if self._client is not None:
            await asyncio.to_thread(self._client.close)

    def track(self, attempt: Attempt, claimed_at: Instant) -> None:
        """Renew ``attempt``'s lease from now on (from the thread: it is woken if idle).
        ``claimed_at``: when its claim (which set the lease) was sent, by ``lease_clock``."""
        with self._lock:
            self._runs[attempt.run_id] = attempt.number
            self._renewed[attempt.run_id] = claimed_at
            self._busy_at = time.monotonic()
            if not self._renewing:
                self._renewing = True
                self._wake.set()

    def untrack(self, attempt: Attempt) -> None:
        """Stop renewing, unless a later attempt at the run took over the entry."""
        with self._lock:
            if self._runs.get(attempt.run_id) == attempt.number:
                del self._runs[attempt.run_id]
                self._renewed.pop(attempt.run_id, None)

    def surely_held(self, attempt: Attempt) -> bool:
        """Whether ``attempt`` surely still holds its run's lease, by this process's clock
        alone (see the module docstring). False is no verdict: ask Redis (a fenced call)."""
        settings = self.settings
        window = settings.lease_seconds - HELD_MARGIN_BEATS * settings.heartbeat_seconds
        with self._lock:
            ours = self._runs.get(attempt.run_id) == attempt.number
            renewed = self._renewed.get(attempt.run_id)
        return ours and renewed is not None and renewed.within(window)

    # -- the event loop's side: the registry entry while idle ----------------------------------
    async def _presence_forever(self) -> None:
        outage = OutageLog(log, "worker presence")
        while True:
            if not self.renewing:
                try:
                    async with self._presence_redis.pipeline(transaction=False) as pipe:
                        self._register(pipe, 0)
                        await pipe.execute()
                    outage.ok()
                except (redis.RedisError, *UNREACHABLE) as exc:
                    outage.failed(exc)
            await asyncio.sleep(self.settings.heartbeat_seconds)

    # -- the thread's side ---------------------------------------------------------------------
    def _loop_forever(self) -> None:
        outage = OutageLog(log, "lease heartbeat")  # once per outage, not once per beat
        holding = False  # whether the client may hold connections
        while not self._stop.is_set():
            self._wake.clear()
            started = time.monotonic()
            runs = self._due(started)
            if runs is None:
                if holding:
                    self._drop_connections()
                    holding = False
            else:
                holding = True
                try:
                    self.beat(runs)
                    outage.ok()
                except Exception as exc:  # the thread must outlive any failure
                    outage.failed(exc)
            elapsed = time.monotonic() - started
            self._wake.wait(max(0.0, self.settings.heartbeat_seconds - elapsed))

    def _due(self, now: float) -> list[tuple[str, int]] | None:
        """The runs to renew on this beat; None: nothing to do (the loop writes the entry)."""
        with self._lock:
            runs = list(self._runs.items())
            if runs:
                self._busy_at = now
            elif self._renewing and now - self._busy_at >= self._linger:
                self._renewing = False
            return runs if self._renewing else None

    def _connected(self) -> Any:
        if self._client is None:
            self._client = connect_sync(
                self._redis_settings, client_name=f"hermes-queue:lease-keeper:{self.worker_id}"
            )
            self._renew = self._client.register_script(self.leases.renew_script)
        return self._client

    def _drop_connections(self) -> None:
        """Close the client's connections (it reconnects on its next use)."""
        client = self._client
        if client is None:
            return
        if isinstance(client, redis.cluster.RedisCluster):
            manager = client.nodes_manager
            nodes = [*manager.nodes_cache.values(), *manager.startup_nodes.values()]
            pools = [n.redis_connection.connection_pool for n in nodes if n.redis_connection]
        else:
            pools = [client.connection_pool]
        for pool in pools:
            with contextlib.suppress(Exception):
                pool.disconnect()

    def beat(self, runs: list[tuple[str, int]]) -> None:
        """Renew ``runs`` (one round trip per node); a lost lease or a stop request goes to
        the event loop. A write Redis refused (a slot being migrated answers ``ASK`` or
        ``TRYAGAIN``) costs only itself: that run stays unrenewed this beat, the others are
        renewed; then ``RenewalsRefused`` is raised so the outage is logged, and after a
        ``MOVED`` the slot table is asked for again, so the next beat reaches the new owner."""
        client = self._connected()
        sent = lease_clock()
        if self.keys.cluster:
            verdicts, registry = self._renew_per_node(client, runs)
        else:
            results = self._send(client, runs, registry=True)
            verdicts = dict(zip((run_id for run_id, _ in runs), results, strict=False))
            registry = results[len(runs) :]
        self._note_renewed(runs, verdicts, sent)
        for run_id, _attempt in runs:
            verdict = verdicts.get(run_id)
            if verdict in (LEASE_LOST, STOP_REQUESTED):
                self._loop.call_soon_threadsafe(self._on_signal, run_id, int(verdict))
        refused = [v for v in (*verdicts.values(), *registry) if isinstance(v, Exception)]
        if self.keys.cluster and (self._failed_nodes or any(map(moved, refused))):
            # A node lost or a slot with another owner: the next beat asks the new table.
            with contextlib.suppress(redis.RedisError, RedisClusterException):
                client.nodes_manager.initialize()
        if refused:
            raise RenewalsRefused(f"{len(refused)} writes of a lease beat: {refused[0]!r}")

    def _note_renewed(
        self, runs: list[tuple[str, int]], verdicts: dict[str, Any], sent: Instant
    ) -> None:
        """Keep when each renewal that landed was sent (``surely_held``); a lost lease is
        never held again. A run untracked meanwhile, or taken over by a later attempt, keeps
        what it has."""
        with self._lock:
            for run_id, attempt in runs:
                verdict = verdicts.get(run_id)
                if self._runs.get(run_id) != attempt or verdict is None:
                    continue
                if verdict == LEASE_LOST:
                    self._renewed.pop(run_id, None)
                elif verdict in (0, STOP_REQUESTED):
                    self._renewed[run_id] = sent

    def _send(self, client: Any, runs: list[tuple[str, int]], *, registry: bool) -> list[Any]:
        """One pipelined round trip to ``client``'s node: a renewal per run, then the registry
        entry when ``registry``; their replies, an error reply in place (it concerns its own
        run: on a cluster, its slot). The renewals go as plain ``EVALSHA``: a
        redis-py pipeline that knows it runs a script asks ``SCRIPT EXISTS`` first, a second
        round trip on every beat. A node that lacks the script (a restart, a promoted replica)
        has it loaded and the beat sent once more: renewals and registry writes are
        idempotent."""
        results = self._pipelined(client, runs, registry)
        if any(isinstance(result, NoScriptError) for result in results):
            client.script_load(self.leases.renew_script)
            results = self._pipelined(client, runs, registry)
        return results

    def _pipelined(self, client: Any, runs: list[tuple[str, int]], registry: bool) -> list[Any]:
        with client.pipeline(transaction=False) as pipe:
            for run_id, attempt in runs:
                keys, args = self.leases.renew_args(run_id, attempt)
                pipe.evalsha(self._renew.sha, len(keys), *keys, *args)
            if registry:
                self._register(pipe, len(runs))
            return list(pipe.execute(raise_on_error=False))

    def _register(self, pipe: Any, busy: int) -> None:
        """This worker's entry in the registry (``keys.workers``, ``keys.worker``)."""
        now_ms = int(time.time() * 1000)
        pipe.zadd(self.keys.workers, {self.worker_id: now_ms})
        pipe.hset(
            self.keys.worker(self.worker_id),
            mapping={**self._record, "busy": busy, "seen_ms": now_ms},
        )
        pipe.expire(self.keys.worker(self.worker_id), int(self.settings.lease_seconds * 3))

    def _renew_per_node(
        self, client: Any, runs: list[tuple[str, int]]
    ) -> tuple[dict[str, Any], list[Any]]:
        """On a Redis Cluster: one pipelined round trip per node serving the runs' shards (the
        registry entry rides with the renewals of its node: its keys share a slot), each
        node's failure its own, so a primary that died leaves the leases on the others renewed.
        Nodes that failed on the last beat go last (a dead host costs a connect timeout); they
        are kept in ``_failed_nodes``, for which ``beat`` asks for the slot table again, so the
        next beat reaches the promoted replica. The renewal verdicts by run id (missing: not
        renewed this beat), and the registry entry's replies (none when its node failed)."""
        by_node: dict[str, list[tuple[str, int]]] = {}
        nodes: dict[str, Any] = {}
        for run_id, attempt in runs:
            node = client.get_node_from_key(self.keys.run(run_id))
            by_node.setdefault(node.name, []).append((run_id, attempt))
            nodes[node.name] = node
        registry = client.get_node_from_key(self.keys.workers)
        by_node.setdefault(registry.name, [])
        nodes.setdefault(registry.name, registry)
        verdicts: dict[str, Any] = {}
        registered: list[Any] = []
        failed: set[str] = set()
        for name in sorted(by_node, key=lambda name: name in self._failed_nodes):
            connection = client.get_redis_connection(nodes[name])
            node_runs = by_node[name]
            try:
                results = self._send(connection, node_runs, registry=name == registry.name)
            except redis.RedisError as exc:
                log.warning("lease heartbeat to %s failed: %s", name, exc)
                failed.add(name)
                continue
            verdicts.update(zip((run_id for run_id, _ in node_runs), results, strict=False))
            registered += results[len(node_runs) :]
        self._failed_nodes = failed
        return verdicts, registered
