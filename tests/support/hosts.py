"""A hermes-queue deployment spread over simulated hosts (``netns.py``): Redis (one
server, or a primary, a replica and three Sentinels), PostgreSQL (a proxy to the suite's), each
API replica and each worker in a network namespace of its own; the caller runs on a client host.

    async with spread(settings, workers=2) as d:   # inside: the calling thread is on d.client
        run_id = await d.create("hello")

Used by the several-hosts tests and the chaos benchmark.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import redis.asyncio as aioredis

from hermes_queue.config import Settings
from hermes_queue.events import RunEvent
from hermes_queue.keys import Keys
from hermes_queue.redisio.connect import connect_url
from hermes_queue.redisio.embedded import bundled_redis_server
from hermes_queue.streams.codec import decode_entry
from tests.support.netns import Host, Network
from tests.support.processes import REPO_ROOT, START_WITHIN, Cluster, Proc, wait_http
from tests.support.redis_group import Node, SentinelGroup

API_PORT = 8642
PROXY_MODULE = "tests.support.netns_proxy"
REDIS_PORT = 6379


@dataclass
class Spread:
    """What :func:`spread` started; the caller's thread is on ``client`` meanwhile."""

    network: Network
    cluster: Cluster
    client: Host
    redis_host: Host
    http: aiohttp.ClientSession
    redis: aioredis.Redis  # through Sentinel when there is one
    group: SentinelGroup | None = None
    apis: dict[Host, tuple[str, Proc]] = field(default_factory=dict)
    workers: dict[Host, Proc] = field(default_factory=dict)

    @property
    def urls(self) -> list[str]:
        return [url for url, _ in self.apis.values()]

    @property
    def keys(self) -> Keys:
        return Keys(self.cluster.settings.redis.namespace)

    async def start_api(self, host: Host) -> str:
        settings = self.cluster.settings.replace(host=host.address, port=API_PORT)
        proc = self.cluster.spawn("api", ["api"], settings, host.launcher)
        url = f"http://{host.address}:{API_PORT}"
        await wait_http(url + "/health", proc.process, f"the API on {host.name}", log=proc.log)
        self.apis[host] = (url, proc)
        return url

    async def start_worker(self, host: Host) -> Proc:
        proc = self.cluster.spawn("worker", ["worker"], self.cluster.settings, host.launcher)
        await proc.wait_for_log("ready (", within=START_WITHIN)
        self.workers[host] = proc
        return proc

    async def create(self, text: str, api: int = 0) -> str:
        async with self.http.post(f"{self.urls[api]}/v1/runs", json={"input": text}) as response:
            assert response.status == 202, await response.text()
            return str((await response.json())["run_id"])

    async def record(self, run_id: str) -> dict[str, str]:
        raw = await cast("Awaitable[dict[bytes, bytes]]", self.redis.hgetall(self.keys.run(run_id)))
        return {k.decode(): v.decode() for k, v in raw.items()}

    async def stream(self, run_id: str) -> list[RunEvent]:
        entries = await self.redis.xrange(self.keys.events(run_id))
        return [decode_entry(run_id, entry_id, fields) for entry_id, fields in entries]

    async def holder(self, run_id: str) -> Host | None:
        """The host of the worker that runs ``run_id`` now (its id carries the pid)."""
        worker = (await self.record(run_id)).get("worker", "")
        pid = int(worker.split(":")[1]) if worker.count(":") >= 2 else -1
        for host, proc in self.workers.items():
            if proc.process.pid == pid:
                return host
        return None


def _proxy(host: Host, target: str) -> subprocess.Popen[bytes]:
    """A TCP proxy listening on ``host`` to ``target`` (host:port) where we run now."""
    proxy = subprocess.Popen(
        [sys.executable, "-m", PROXY_MODULE, host.name, f"{host.address}:5432", target],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
    )
    assert proxy.stdout is not None and proxy.stdout.readline().strip() == b"ready"
    return proxy


def _redis_node(host: Host, workdir: Path) -> Node:
    args = [bundled_redis_server(), "--bind", host.address, "--port", str(REDIS_PORT)]
    args += ["--save", "", "--appendonly", "no", "--protected-mode", "no"]
    return Node("redis", host.address, REDIS_PORT, args, workdir, host.launcher)


@contextlib.asynccontextmanager
async def spread(
    settings: Settings,
    *,
    apis: int = 2,
    workers: int = 2,
    sentinel: bool = False,
    replicas: int = 1,
    down_after_ms: int = 1_000,
) -> AsyncIterator[Spread]:
    """Start everything on hosts of its own; ``settings.store.url``, when PostgreSQL, is
    reached through a proxy on a PostgreSQL host (its schema must exist). ``sentinel``: a
    primary, ``replicas`` replicas and three Sentinels on the Redis host, which take a primary
    for dead after ``down_after_ms``."""
    network = Network().create()
    proxy = None
    try:
        redis_host = network.add_host("redis")
        api_hosts = [network.add_host(f"api{i}") for i in range(apis)]
        worker_hosts = [network.add_host(f"worker{i}") for i in range(workers)]
        store_url = settings.store.url
        if store_url.startswith("postgresql://"):
            pg_host = network.add_host("pg")
            parts = urlsplit(store_url)
            proxy = _proxy(pg_host, f"{parts.hostname}:{parts.port or 5432}")
            userinfo = parts.netloc.rpartition("@")[0]
            netloc = f"{userinfo}@{pg_host.address}:5432" if userinfo else f"{pg_host.address}:5432"
            store_url = urlunsplit(parts._replace(netloc=netloc))
        client = network.add_host("client")
        with client.entered():
            nodes = 1 + replicas if sentinel else 0
            async with _on_hosts(
                settings, store_url, network, client, redis_host, nodes, down_after_ms
            ) as d:
                for host in api_hosts:
                    await d.start_api(host)
                for host in worker_hosts:
                    await d.start_worker(host)
                yield d
    finally:
        network.destroy()
        if proxy is not None:
            proxy.kill()
            proxy.wait(5)


@contextlib.asynccontextmanager
async def _on_hosts(
    settings: Settings,
    store_url: str,
    network: Network,
    client: Host,
    redis_host: Host,
    sentinel_nodes: int,
    down_after_ms: int = 1_000,
) -> AsyncIterator[Spread]:
    """``sentinel_nodes``: 0 for one plain Redis, else the data nodes of a Sentinel group."""
    cluster = Cluster(settings.replace(store_url=store_url))
    group, node = None, None
    if sentinel_nodes:
        ports = [REDIS_PORT + i for i in range(sentinel_nodes)] + [26379, 26380, 26381]
        group = SentinelGroup(
            host=redis_host.address,
            launcher=redis_host.launcher,
            ports=ports,
            replicas=sentinel_nodes - 1,
            down_after_ms=down_after_ms,
        )
        group.start()
        redis_url = group.url
    else:
        node = _redis_node(redis_host, Path(cluster.logdir))
        node.start()
        redis_url = f"redis://{redis_host.address}:{REDIS_PORT}/0"
    cluster.settings = cluster.settings.replace(redis_url=redis_url)
    headers = {"Authorization": f"Bearer {settings.api.api_key}"}
    d = Spread(
        network=network,
        cluster=cluster,
        client=client,
        redis_host=redis_host,
        http=aiohttp.ClientSession(headers=headers),
        redis=connect_url(redis_url),
        group=group,
    )
    try:
        yield d
    finally:
        cluster.stop_all()
        await d.http.close()
        await d.redis.aclose()
        if group is not None:
            group.stop()
        if node is not None:
            node.stop()
