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
import logging
import threading
import time
from collections.abc import Callable

import redis

from hermes_queue.config import RedisSettings
from hermes_queue.redis_client import connect_sync
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
        self._loaded = False
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
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.beat()
            except redis.RedisError as exc:
                log.warning("lease heartbeat failed: %s", exc)
            elapsed = time.monotonic() - started
            self._stop.wait(max(0.0, self.settings.heartbeat_seconds - elapsed))

    def beat(self) -> None:
        with self._lock:
            runs = list(self._runs.items())
        if self.keys.cluster and not self._loaded:  # raw EVALSHAs below load nothing
            self._client.script_load(self._renew.script)
            self._loaded = True
        with self._client.pipeline(transaction=False) as pipe:
            for run_id, attempt in runs:
                keys, args = self.leases.renew_args(run_id, attempt)
                if self.keys.cluster:  # a cluster pipeline takes scripts only as commands
                    pipe.execute_command(  # type: ignore[no-untyped-call]
                        "EVALSHA", self._renew.sha, len(keys), *keys, *args
                    )
                else:
                    self._renew(keys=keys, args=args, client=pipe)
            now_ms = int(time.time() * 1000)
            pipe.zadd(self.keys.workers, {self.worker_id: now_ms})
            pipe.hset(
                self.keys.worker(self.worker_id),
                mapping={**self._record, "busy": len(runs), "seen_ms": now_ms},
            )
            pipe.expire(self.keys.worker(self.worker_id), int(self.settings.lease_seconds * 3))
            try:
                results = pipe.execute()
            except redis.exceptions.NoScriptError:
                # A node without the script (a promoted replica): load it everywhere; the
                # next beat renews (a lease outlasts several beats).
                self._loaded = False
                raise
        for (run_id, _attempt), verdict in zip(runs, results[: len(runs)], strict=True):
            if verdict in (LEASE_LOST, STOP_REQUESTED):
                self._loop.call_soon_threadsafe(self._on_signal, run_id, int(verdict))
