"""Renews the leases of this worker's runs from a thread of its own.

Agent code runs on the worker's event loop (and the Hermes backend in executor threads). A
synchronous call or a CPU-bound stretch there would starve an asyncio heartbeat, and the run
would be reaped as lost while it is in fact alive. A plain thread with its own synchronous Redis
connection keeps beating as long as the process lives; when the process dies or freezes, the
lease lapses within ``lease_seconds`` and the reaper takes over.

Each beat is one pipelined round trip: a renewal per run (which also reports a pending stop
request, so a missed pub/sub message only delays a stop by one beat) plus this worker's own
presence entry.
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

from hermes_queue.config import RedisSettings
from hermes_queue.redisio.connect import connect_sync
from hermes_queue.redisio.health import OutageLog
from hermes_queue.runs.attempt import Attempt
from hermes_queue.runs.leases import Leases

log = logging.getLogger(__name__)

LEASE_LOST = -1
STOP_REQUESTED = 1


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
        metrics_port: int | None = None,
    ) -> None:
        # Its timings are the leases' (lease_seconds, heartbeat_seconds), as are the keys.
        self.settings = leases.settings
        self.leases = leases
        self.worker_id = worker_id
        self.keys = leases.keys
        self._loop = loop
        self._on_signal = on_signal
        # Which port of the metrics range this worker got: the registry tells operators.
        self._record: dict[str, int] = {"slots": slots}
        if metrics_port:
            self._record["metrics_port"] = metrics_port
        self._runs: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._client = connect_sync(redis_settings)
        self._renew = self._client.register_script(leases.renew_script)
        # On a cluster: the nodes whose renewals failed on the last beat (_renew_per_node).
        self._failed_nodes: set[str] = set()
        self._thread = threading.Thread(target=self._loop_forever, name="lease-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.settings.heartbeat_seconds * 4)
        try:
            with self._client.pipeline(transaction=False) as pipe:
                pipe.zrem(self.keys.workers, self.worker_id)
                pipe.delete(self.keys.worker(self.worker_id))
                pipe.execute()
        except redis.RedisError:
            log.warning("could not remove worker %s from the registry", self.worker_id)
        self._client.close()

    def track(self, attempt: Attempt) -> None:
        with self._lock:
            self._runs[attempt.run_id] = attempt.number

    def untrack(self, attempt: Attempt) -> None:
        """Stop renewing, unless a later attempt at the run took over the entry."""
        with self._lock:
            if self._runs.get(attempt.run_id) == attempt.number:
                del self._runs[attempt.run_id]

    def _loop_forever(self) -> None:
        outage = OutageLog(log, "lease heartbeat")  # once per outage, not once per beat
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.beat()
                outage.ok()
            except redis.RedisError as exc:
                outage.failed(exc)
            elapsed = time.monotonic() - started
            self._stop.wait(max(0.0, self.settings.heartbeat_seconds - elapsed))

    def beat(self) -> None:
        with self._lock:
            runs = list(self._runs.items())
        if self.keys.cluster:
            verdicts = self._renew_per_node(runs)
            with self._client.pipeline(transaction=False) as pipe:
                self._register(pipe, len(runs))
                pipe.execute()
        else:
            with self._client.pipeline(transaction=False) as pipe:
                for run_id, attempt in runs:
                    keys, args = self.leases.renew_args(run_id, attempt)
                    self._renew(keys=keys, args=args, client=pipe)
                self._register(pipe, len(runs))
                results = pipe.execute()
            verdicts = dict(zip((run_id for run_id, _ in runs), results, strict=False))
        for run_id, _attempt in runs:
            verdict = verdicts.get(run_id)
            if verdict in (LEASE_LOST, STOP_REQUESTED):
                self._loop.call_soon_threadsafe(self._on_signal, run_id, int(verdict))

    def _register(self, pipe: Any, busy: int) -> None:
        """This worker's entry in the registry (``keys.workers``, ``keys.worker``)."""
        now_ms = int(time.time() * 1000)
        pipe.zadd(self.keys.workers, {self.worker_id: now_ms})
        pipe.hset(
            self.keys.worker(self.worker_id),
            mapping={**self._record, "busy": busy, "seen_ms": now_ms},
        )
        pipe.expire(self.keys.worker(self.worker_id), int(self.settings.lease_seconds * 3))

    def _renew_per_node(self, runs: list[tuple[str, int]]) -> dict[str, Any]:
        """On a Redis Cluster: one pipelined round trip per node serving the runs' shards, each
        node's failure its own, so a primary that died leaves the leases on the others renewed.
        Nodes that failed on the last beat go last (a dead host costs a connect timeout), and a
        failure refreshes the slot table, so the next beat reaches the promoted replica. The
        renewal verdicts by run id (missing: not renewed this beat)."""
        by_node: dict[str, list[tuple[str, int]]] = {}
        nodes: dict[str, Any] = {}
        for run_id, attempt in runs:
            node = self._client.get_node_from_key(self.keys.run(run_id))  # type: ignore[attr-defined]
            by_node.setdefault(node.name, []).append((run_id, attempt))
            nodes[node.name] = node
        verdicts: dict[str, Any] = {}
        failed: set[str] = set()
        for name in sorted(by_node, key=lambda name: name in self._failed_nodes):
            client = self._client.get_redis_connection(nodes[name])  # type: ignore[attr-defined]
            try:
                with client.pipeline(transaction=False) as pipe:
                    for run_id, attempt in by_node[name]:
                        keys, args = self.leases.renew_args(run_id, attempt)
                        self._renew(keys=keys, args=args, client=pipe)
                    results = pipe.execute()
            except redis.RedisError as exc:
                log.warning("lease heartbeat to %s failed: %s", name, exc)
                failed.add(name)
                continue
            verdicts.update(zip((run_id for run_id, _ in by_node[name]), results, strict=True))
        self._failed_nodes = failed
        if failed:
            with contextlib.suppress(redis.RedisError):
                self._client.nodes_manager.initialize()  # type: ignore[attr-defined]
        return verdicts
