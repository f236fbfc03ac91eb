"""Every Redis connection a process opens starts here: the one module that reads ``redis_url``.

``redis_url`` names either one server or a group watched by Sentinel:

* ``redis://[[user]:password@]host[:port][/db]`` (also ``rediss://``, ``unix://``): that server;
* ``redis+sentinel://[[user]:password@]host1[:port1][,host2[:port2]…]/<service>[/<db>]``: the
  primary of Sentinel service ``<service>``, asked of the Sentinels listed (port 26379 by
  default). The credentials and ``db`` are the data nodes'; the Sentinels are queried without
  AUTH (arq, which runs the worker's job loop, cannot authenticate to them);
* ``redis+cluster://[[user]:password@]host1[:port1][,host2[:port2]…]``: a Redis Cluster
  (``redisio/cluster.py``). Its clients are redis-py's ``RedisCluster``, handed out under the
  plain client's type: they take the same calls for everything hermes-queue sends them
  (single-key commands, script calls whose keys share a slot, non-transactional pipelines).

Discovery is redis-py's (and arq's) own: a connection asks the Sentinels for the primary each
time it connects, so after a failover every process reaches the new primary on its next
reconnect, without a restart; while there is none, calls fail with ``ConnectionError`` within
the timeouts below (the API answers 503 ``redis_unavailable``), never hang.

The factories, one per kind of user: :func:`connect` (pooled async client; ``for_pubsub``
without a read timeout), :func:`connect_url` (a client for a bare URL, as the stream hub takes
one), :func:`connect_sync` (the lease keeper's thread); arq's settings are the job queue
adapter's (``jobqueue/connection.py``), from :func:`parse_sentinel_url`. Connections outside a
pool (``redisio.pipeline.dedicated_connection``) are built from a client's pool, so they follow
the same primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio as aioredis
import redis.connection
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.sentinel import Sentinel
from redis.sentinel import Sentinel as SyncSentinel

from hermes_queue.config import RedisSettings
from hermes_queue.logs import mask_url
from hermes_queue.redisio.addresses import host_and_port, is_loopback
from hermes_queue.redisio.cluster import (
    connect_cluster,
    connect_cluster_sync,
    parse_cluster_url,
)
from hermes_queue.redisio.health import OutageLog, classify
from hermes_queue.redisio.pool import BoundedPool
from hermes_queue.redisio.sentinel_pool import BoundedSentinelPool, SentinelPool
from hermes_queue.redisio.switchover import (
    SwitchoverConnection,
    SwitchoverSentinelConnection,
    switchover_options,
)

log = logging.getLogger(__name__)

COMMAND_TIMEOUT = 5.0
CONNECT_TIMEOUT = 2.0
# Sentinels answer from memory: a slow one is a dead one, ask the next.
SENTINEL_TIMEOUT = 1.0
SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_PORT = 26379


@dataclass(frozen=True)
class SentinelTarget:
    """A ``redis+sentinel://`` URL, parsed."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None

    def node_kwargs(self) -> dict[str, Any]:
        """Connection arguments of the data nodes (primary and replicas)."""
        return {"db": self.db, "username": self.username, "password": self.password}


def parse_sentinel_url(url: str) -> SentinelTarget | None:
    """The Sentinel group ``url`` names; None for a plain Redis URL. ValueError when malformed
    (the message never repeats the password)."""
    scheme = url.partition("://")[0]
    if scheme.lower() != SENTINEL_SCHEME:
        if scheme.lower().endswith("+sentinel"):
            raise ValueError(f"unsupported scheme {scheme!r}: use {SENTINEL_SCHEME}://")
        return None
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ValueError("a redis+sentinel URL takes no query or fragment")
    hosts = parts.netloc.rpartition("@")[2]
    sentinels = tuple(
        host_and_port(item, SENTINEL_PORT, "Sentinel address")
        for item in hosts.split(",")
        if item.strip()
    )
    if not sentinels:
        raise ValueError("a redis+sentinel URL names at least one Sentinel host")
    path = [unquote(piece) for piece in parts.path.split("/")[1:]]
    if not path or not path[0] or len(path) > 2:
        raise ValueError("a redis+sentinel URL ends in /<service> or /<service>/<db>")
    db = path[1] if len(path) == 2 and path[1] else "0"
    if not db.isdigit():
        raise ValueError(f"database {db!r} is not a number")
    return SentinelTarget(
        sentinels=sentinels,
        service=path[0],
        db=int(db),
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
    )


def on_this_host(url: str) -> bool:
    """Whether every Redis address ``url`` names is a loopback one (or a Unix socket): then the
    processes sharing it share this host too."""
    target = parse_sentinel_url(url)
    cluster = parse_cluster_url(url)
    if cluster is not None:
        hosts = [host for host, _port in cluster.seeds]
    elif target is not None:
        hosts = [host for host, _port in target.sentinels]
    else:
        parts = urlsplit(url)
        if parts.scheme == "unix":
            return True
        hosts = [parts.hostname or "localhost"]
    return all(is_loopback(host) for host in hosts)


def _sentinel_kwargs() -> dict[str, Any]:
    return {"socket_timeout": SENTINEL_TIMEOUT, "socket_connect_timeout": SENTINEL_TIMEOUT}


def _through_sentinel(target: SentinelTarget, **options: Any) -> aioredis.Redis:
    """An async client of ``target``'s primary; bounded pool when ``max_connections`` is given."""
    pool_class = BoundedSentinelPool if "max_connections" in options else SentinelPool
    manager = Sentinel(target.sentinels, sentinel_kwargs=_sentinel_kwargs())  # type: ignore[no-untyped-call]
    client: aioredis.Redis = manager.master_for(
        target.service, connection_pool_class=pool_class, **target.node_kwargs(), **options
    )
    return client


def connect(settings: RedisSettings, *, for_pubsub: bool = False) -> aioredis.Redis:
    """A pooled async client. ``for_pubsub`` has no read timeout: a quiet channel is normal.

    The pool is bounded (``redis_pool_size``, ``redisio.pool.BoundedPool``): a burst of requests
    waits for a connection instead of opening one per request, so a process's connection count
    stays constant.
    """
    options: dict[str, Any] = {
        "max_connections": settings.pool_size,
        "timeout": COMMAND_TIMEOUT,
        "socket_timeout": None if for_pubsub else COMMAND_TIMEOUT,
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "health_check_interval": 30,
    }
    cluster = parse_cluster_url(settings.url)
    if cluster is not None:
        # Pub/sub on a cluster is per shard, on the node serving it (redis_cluster.connect_node).
        assert not for_pubsub, "no cluster-wide pub/sub client: subscribe per shard"
        client = connect_cluster(
            cluster, switchover_wait=settings.switchover_wait_seconds, **options
        )
        return cast("aioredis.Redis", client)
    # A switchover is waited out, retrying only what was not applied (redisio/switchover.py).
    waits = settings.switchover_wait_seconds > 0
    options.update(switchover_options(settings.switchover_wait_seconds))
    target = parse_sentinel_url(settings.url)
    if target is not None:
        if waits:
            options["connection_class"] = SwitchoverSentinelConnection
        return _through_sentinel(target, **options)
    if waits and settings.url.partition("://")[0].lower() == "redis":  # not TLS nor a socket
        options["connection_class"] = SwitchoverConnection
    pool = BoundedPool.from_url(settings.url, **options)
    return aioredis.Redis(connection_pool=pool)


async def close(client: aioredis.Redis) -> None:
    """Close a client of :func:`connect` and its pool (a cluster client owns its nodes')."""
    if isinstance(client, AsyncRedisCluster):
        await client.aclose()
    else:
        await client.aclose(close_connection_pool=True)


def connect_url(url: str) -> aioredis.Redis:
    """An unbounded async client for ``url`` (any form), with redis-py's defaults."""
    cluster = parse_cluster_url(url)
    if cluster is not None:
        return cast("aioredis.Redis", connect_cluster(cluster))
    target = parse_sentinel_url(url)
    return aioredis.Redis.from_url(url) if target is None else _through_sentinel(target)


def connect_sync(
    settings: RedisSettings,
    *,
    socket_timeout: float = COMMAND_TIMEOUT,
    client_name: str | None = None,
) -> redis.Redis:
    """A synchronous client, for code that runs in a thread of its own (the lease keeper);
    ``client_name``: what its connections are named (``CLIENT LIST``)."""
    options: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": CONNECT_TIMEOUT,
    }
    if client_name:
        options["client_name"] = client_name
    cluster = parse_cluster_url(settings.url)
    if cluster is not None:
        return cast("redis.Redis", connect_cluster_sync(cluster, **options))
    target = parse_sentinel_url(settings.url)
    if target is None:
        return redis.Redis.from_url(settings.url, **options)
    manager = SyncSentinel(target.sentinels, sentinel_kwargs=_sentinel_kwargs())  # type: ignore[no-untyped-call]
    client: redis.Redis = manager.master_for(  # type: ignore[no-untyped-call]
        target.service, **target.node_kwargs(), **options
    )
    return client


def url_problem(url: str) -> str | None:
    """What keeps ``url`` from naming a Redis to connect to (the parsers' own reasons, never
    quoting the password), or None. Checked when a process starts (``cli/preflight.py``), so a
    malformed URL is one line there rather than a traceback from the first connection."""
    try:
        if parse_cluster_url(url) is None and parse_sentinel_url(url) is None:
            redis.connection.parse_url(url)  # type: ignore[no-untyped-call]  # from_url's parser
    except ValueError as exc:
        return str(exc)
    return None


async def wait_until_answering(
    settings: RedisSettings, what: str, *, first_delay: float = 0.1, max_delay: float = 5.0
) -> None:
    """Return once Redis answers PING; until then retry with backoff (``first_delay`` doubling
    up to ``max_delay``), logging once per change of state (``health.OutageLog``), not per try.

    A worker calls this before it takes jobs, so start order does not matter: a worker started
    before Redis (a Kubernetes rollout, a compose stack) waits instead of crash-looping, and so
    does one pointed at something that is not Redis, until it is fixed. A failure that says
    nothing about the server (``health.classify`` is None) is raised.
    """
    outage = OutageLog(log, what, where=f"redis_url {mask_url(settings.url)}")
    delay = first_delay
    while True:
        client = connect(settings)
        try:
            await client.ping()
        except Exception as exc:
            if classify(exc) is None:
                raise
            outage.failed(exc)
        else:
            if outage.failing:
                outage.ok()
            return
        finally:
            with contextlib.suppress(Exception):
                await close(client)
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_delay)


__all__ = [
    "COMMAND_TIMEOUT",
    "CONNECT_TIMEOUT",
    "SentinelTarget",
    "close",
    "connect",
    "connect_sync",
    "connect_url",
    "on_this_host",
    "parse_sentinel_url",
    "url_problem",
    "wait_until_answering",
]
