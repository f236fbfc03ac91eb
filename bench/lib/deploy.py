"""A benchmark's deployment: a private Redis (unless ``HERMES_QUEUE_BENCH_REDIS_URL`` names one)
and real hermes-queue processes in one fresh namespace, started by the tests' own launcher
(``tests.support.processes.Cluster``: ``python -m hermes_queue api|worker``, this checkout)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import tempfile
import uuid
from typing import Any, cast

import psutil
import redis

from bench.lib import sync_redis
from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.redisio.embedded import EmbeddedRedis, named_or_embedded
from tests.support.polling import eventually
from tests.support.processes import Cluster, reap

API_KEY = "bench-key-5c1e9a7f3d2b80649e17"  # strong: chaos binds beyond loopback (keyguard)
BENCH_REDIS_VAR = "HERMES_QUEUE_BENCH_REDIS_URL"


def bench_redis_url() -> contextlib.AbstractContextManager[str]:
    """The Redis a benchmark without a ``Deployment`` talks to: the one
    ``HERMES_QUEUE_BENCH_REDIS_URL`` names, else a bundled server started now, stopped after."""
    return named_or_embedded(BENCH_REDIS_VAR)


class Deployment:
    """``with Deployment(name, overrides) as dep:``; ``await dep.start_api()``,
    ``await dep.start_workers(n)``; everything stops when the block ends."""

    def __init__(self, name: str, overrides: dict[str, Any] | None = None) -> None:
        self.redis_server: EmbeddedRedis | None = None
        url = os.environ.get(BENCH_REDIS_VAR)
        if not url:
            self.redis_server = EmbeddedRedis.start()
            url = self.redis_server.url
        settings = Settings.of(
            redis_url=url,
            namespace=f"bench-{name}-{uuid.uuid4().hex[:8]}",
            api_key=API_KEY,
            log_level="WARNING",
            **(overrides or {}),
        ).validate()
        self.cluster = Cluster(settings, logdir=tempfile.mkdtemp(prefix="hq-bench-"))
        self.keys = Keys(settings.redis.namespace)
        self.redis = redis.Redis.from_url(url)
        self.api_procs: list[psutil.Process] = []

    @property
    def settings(self) -> Settings:
        return self.cluster.settings

    @property
    def logdir(self) -> str:
        return self.cluster.logdir

    # -- processes ---------------------------------------------------------------------------
    async def start_api(self, **overrides: Any) -> str:
        """An API process answering ``/health``; its base URL (its process: ``api_procs``)."""
        url, proc = await self.cluster.start_api_process(**overrides)
        self.api_procs.append(psutil.Process(proc.process.pid))
        return url

    async def start_workers(
        self, count: int = 1, **overrides: Any
    ) -> list[subprocess.Popen[bytes]]:
        """Start workers and wait until each listens on the wake-up channel (a worker does once
        its warm-up is over; at log level WARNING it logs nothing to wait for)."""
        before = self.wake_listeners()
        settings = self.settings.replace(**overrides)
        started = [self.cluster.spawn("worker", ["worker"], settings) for _ in range(count)]

        def listening() -> bool:
            for proc in started:
                if proc.process.poll() is not None:
                    raise RuntimeError(f"a worker exited; logs in {self.logdir}")
            return self.wake_listeners() >= before + count

        await eventually(listening, within=30, what=f"{count} worker(s) listening")
        await asyncio.sleep(0.3)  # let the first queue poll and heartbeat pass
        return [proc.process for proc in started]

    def stop_workers(self, workers: list[subprocess.Popen[bytes]]) -> None:
        """Stop these workers (SIGTERM, then reaped) and forget them."""
        for process in workers:
            process.terminate()
        for process in workers:
            reap(process, 30)
        self.cluster.procs = [p for p in self.cluster.procs if p.process not in workers]

    def wake_listeners(self) -> int:
        counts = cast(list[tuple[bytes, int]], self.redis.pubsub_numsub(self.keys.wake_channel))
        return int(dict(counts)[self.keys.wake_channel.encode()])

    def stop(self) -> None:
        self.cluster.stop_all(timeout=15)
        self.redis.close()
        if self.redis_server is not None:
            self.redis_server.stop()

    # -- Redis-side figures ------------------------------------------------------------------
    def info(self, section: str) -> dict[str, Any]:
        return sync_redis.info(self.redis, section)

    def total_commands(self) -> int:
        return int(self.info("stats")["total_commands_processed"])

    def redis_connections_of(self, pid: int) -> int:
        """TCP connections from process ``pid`` to this deployment's Redis port."""
        port = int(self.settings.redis.url.rsplit(":", 1)[1].split("/")[0])
        conns = psutil.Process(pid).net_connections(kind="tcp")
        return sum(1 for c in conns if c.raddr and c.raddr.port == port)

    def redis_used_memory_mib(self) -> float:
        """Redis's ``used_memory`` (its allocator's view of the whole dataset), MiB."""
        return round(int(self.info("memory")["used_memory"]) / 2**20, 2)

    def redis_version(self) -> str:
        return str(self.info("server")["redis_version"])

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
