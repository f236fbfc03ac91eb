"""A Redis Cluster behind ``redis+cluster://host:port[,host:port…]``: its clients.

``redisio.connect`` hands a cluster URL here. The clients, by what they serve:

* :func:`connect_cluster` / :func:`connect_cluster_sync`: redis-py's ``RedisCluster``, which
  routes each command (and each script call, by its first key) to the primary of its slot and
  follows ``MOVED`` and failovers on its own. Every run script names keys of one slot
  (``keys.py``), so it runs there unchanged.
* :func:`primaries_of` / :func:`connect_address`: which primary serves each of some slots, and
  a plain client of one: what a worker's per-node wake-up listener is built from
  (``workers/shard_listener.py``).
* :func:`connect_node`: a plain client whose connections go to the primary serving a slot,
  looked up each time one connects: a shard's sharded pub/sub (``SSUBSCRIBE``; redis-py 5's
  asyncio ``RedisCluster`` has no pub/sub of its own), the stream hub's ``XREAD``\\ s of one
  shard and a worker's pipelined appends to it (``streams/sharded.py``,
  ``workers/shard_listener.py``, ``redisio.pipeline.SlotPipelines``). Where a slot is served is
  asked of a :class:`SlotMap` (a cluster client of its own); after the first connection each
  new one asks the cluster again, so a connection lost to a failover reconnects to the promoted
  replica.

The seeds in the URL are where the slot table is first asked for, and where a client goes back
to when every node it knew failed (``redisio/cluster_seeds.py``): list several nodes so that
one being down does not stop a process from starting. The credentials are every node's;
a cluster has only database 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio as aioredis
import redis.cluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import ResponseError

from hermes_queue.redisio.addresses import host_and_port
from hermes_queue.redisio.cluster_retry import SafeRetryCluster
from hermes_queue.redisio.cluster_seeds import keep_seeds, restore_seeds, seeds_of
from hermes_queue.redisio.redirections import redirection

CLUSTER_SCHEME = "redis+cluster"
DEFAULT_PORT = 6379

Address = tuple[str, int]
# How often a worker closes its cluster client's surplus idle connections (trim_forever).
TRIM_SECONDS = 30.0
IDLE_TRIM_SECONDS = 1.0
# How long a node client's connection attempt may take (a node that does not answer).
CONNECT_TIMEOUT = 5.0


@dataclass(frozen=True)
class ClusterTarget:
    """A ``redis+cluster://`` URL, parsed."""

    seeds: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None


def parse_cluster_url(url: str) -> ClusterTarget | None:
    """The cluster ``url`` names; None for any other URL. ValueError when malformed (the
    message never repeats the password)."""
    if url.partition("://")[0].lower() != CLUSTER_SCHEME:
        return None
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ValueError("a redis+cluster URL takes no query or fragment")
    if parts.path not in ("", "/", "/0"):
        raise ValueError("a Redis Cluster has only database 0")
    seeds = tuple(
        host_and_port(item, DEFAULT_PORT, "cluster node address")
        for item in parts.netloc.rpartition("@")[2].split(",")
    )
    return ClusterTarget(
        seeds=seeds,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
    )


def connect_cluster(
    target: ClusterTarget, *, switchover_wait: float = 0.0, **options: Any
) -> AsyncRedisCluster:
    """An asyncio cluster client; ``max_connections`` bounds each node's pool. A call that
    failed is sent again for up to ``switchover_wait`` seconds when that is safe
    (redisio/cluster_retry.py); MOVED and ASK are followed."""
    options.pop("timeout", None)  # a pool's wait for a free connection: not a cluster option
    options.pop("health_check_interval", None)
    client: AsyncRedisCluster = SafeRetryCluster(  # type: ignore[abstract]
        startup_nodes=[ClusterNode(host, port) for host, port in target.seeds],
        username=target.username,
        password=target.password,
        switchover_wait=switchover_wait,
        **options,
    )
    return client


def connect_cluster_sync(target: ClusterTarget, **options: Any) -> redis.cluster.RedisCluster:
    """A synchronous cluster client (the lease keeper's thread)."""
    nodes = [redis.cluster.ClusterNode(host, port) for host, port in target.seeds]  # type: ignore[no-untyped-call]
    client: redis.cluster.RedisCluster = redis.cluster.RedisCluster(
        startup_nodes=nodes,
        username=target.username,
        password=target.password,
        **options,
    )
    client.nodes_manager.__class__ = _SeedKeepingNodesManager
    keep_seeds(client.nodes_manager)
    return client


class _SeedKeepingNodesManager(redis.cluster.NodesManager):
    """The synchronous client's nodes manager, putting back the seeds redis-py dropped before
    each rebuild (``redisio/cluster_seeds.py``). Set as the class of the client's own manager:
    redis-py takes no manager class."""

    def initialize(self) -> None:
        restore_seeds(self, redis.cluster.ClusterNode)
        super().initialize()  # type: ignore[no-untyped-call]


class NodeConnection(aioredis.Connection):
    """A connection that asks ``resolve`` which node to reach each time it connects, and tells
    it where a ``MOVED`` reply says the slot went."""

    def __init__(self, *, resolve: SlotResolver, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.resolve = resolve

    async def _connect(self) -> None:
        self.host, self.port = await self.resolve()
        await super()._connect()  # type: ignore[no-untyped-call]

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except ResponseError as error:
            moved = redirection(error)
            if moved is not None and moved.kind == "MOVED":
                self.resolve.moved(host_and_port(moved.address, DEFAULT_PORT, "MOVED address"))
            raise


class SlotMap:
    """Which primary serves which slot, for the node clients: a cluster client of its own that
    sends nothing but ``CLUSTER SLOTS``, so refreshing it never disturbs the commands in flight
    on the process's cluster client (redis-py replaces and disconnects a refreshed client's
    nodes). One refresh at a time, at most one per :data:`REFRESH_INTERVAL`."""

    REFRESH_INTERVAL = 0.25

    def __init__(self, cluster: AsyncRedisCluster) -> None:
        seeds = [ClusterNode(host, port) for host, port in seeds_of(cluster.nodes_manager)]
        credentials = {k: cluster.connection_kwargs.get(k) for k in ("username", "password")}
        self._client = AsyncRedisCluster(startup_nodes=seeds, **credentials)
        self._lock = asyncio.Lock()
        self._refreshed_at = 0.0

    async def primary(self, slot: int, *, refresh: bool) -> tuple[str, int]:
        """The address of the primary serving ``slot``; ``refresh``: ask the cluster first (a
        reconnect: the node may have failed over)."""
        async with self._lock:
            await self._client.initialize()
            now = asyncio.get_running_loop().time()
            if refresh and now - self._refreshed_at >= self.REFRESH_INTERVAL:
                self._refreshed_at = now
                await self._client.nodes_manager.initialize()
            # Asked rarely: hold no connection in between.
            await asyncio.gather(*(node.disconnect() for node in self._client.get_nodes()))
        node = self._client.nodes_manager.get_node_from_slot(slot)
        return node.host, int(node.port)

    async def aclose(self) -> None:
        await self._client.aclose()


class SlotResolver:
    """Where a node client's next connection goes: the primary of ``slot``. The first lookup
    uses the slot table as it is; every later one (a reconnect) refreshes it first, unless a
    node has just answered ``MOVED``: that node, the slot's former owner, names the new one
    before every node's ``CLUSTER SLOTS`` agrees (during a switchover a refresh can still
    name the old primary, and a connection made there is redirected again, over and over)."""

    def __init__(self, slots: SlotMap, slot: int) -> None:
        self._slots = slots
        self._slot = slot
        self._connected = False
        self._moved_to: Address | None = None

    async def __call__(self) -> Address:
        moved_to, self._moved_to = self._moved_to, None
        address = moved_to or await self._slots.primary(self._slot, refresh=self._connected)
        self._connected = True
        return address

    def moved(self, address: Address) -> None:
        self._moved_to = address


# One slot map per cluster client (the process's), shared by all its node clients.
_slot_maps: weakref.WeakKeyDictionary[AsyncRedisCluster, SlotMap] = weakref.WeakKeyDictionary()


def _slot_map(cluster: AsyncRedisCluster) -> SlotMap:
    slots = _slot_maps.get(cluster)
    if slots is None:
        slots = _slot_maps[cluster] = SlotMap(cluster)
    return slots


async def primaries_of(
    cluster: AsyncRedisCluster, slots: Iterable[int], *, refresh: bool
) -> dict[int, tuple[str, int]]:
    """The address of the primary serving each of ``slots``; ``refresh``: ask the cluster
    first (after a lost connection or a moved slot). What groups per-shard work by node."""
    slot_map = _slot_map(cluster)
    found: dict[int, tuple[str, int]] = {}
    for slot in slots:
        found[slot] = await slot_map.primary(slot, refresh=refresh and not found)
    return found


def connect_address(cluster: AsyncRedisCluster, address: tuple[str, int]) -> aioredis.Redis:
    """A plain client of the node at ``address``, with the cluster client's credentials."""
    kwargs = cluster.connection_kwargs
    return aioredis.Redis(
        host=address[0],
        port=address[1],
        username=kwargs.get("username"),
        password=kwargs.get("password"),
        socket_connect_timeout=CONNECT_TIMEOUT,
    )


def node_resolver(cluster: AsyncRedisCluster, slot: int) -> SlotResolver:
    """The resolver of a node client of ``slot``, on the process's shared slot map."""
    return SlotResolver(_slot_map(cluster), slot)


async def trim_idle(cluster: AsyncRedisCluster, keep: int = 1) -> int:
    """Close each node's free connections beyond ``keep``; how many were closed. redis-py's
    cluster client never closes a connection it opened, so a node's pool stays as large as
    the most commands ever in flight on it at once: on an idle worker, the moment its poll,
    reaper and webhook sender met. Reaches into redis-py's ``ClusterNode`` (``_free``,
    ``_connections``; pinned by tests/redisio/test_cluster_trim.py). A free connection is in
    no command's hands, and nothing awaits between taking it out and closing it."""
    closed = 0
    for node in cluster.get_nodes():
        free, connections = node._free, node._connections
        surplus = []
        while len(free) > keep:
            connection = free.pop()
            connections.remove(connection)
            surplus.append(connection)
        closed += len(surplus)
        for connection in surplus:
            with contextlib.suppress(Exception):
                await connection.disconnect()
    return closed


async def trim_forever(
    cluster: AsyncRedisCluster,
    every: float = TRIM_SECONDS,
    *,
    idle: Callable[[], bool] = lambda: False,
    idle_every: float = IDLE_TRIM_SECONDS,
) -> None:
    """:func:`trim_idle` every ``every`` seconds until cancelled (a worker's side task); while
    the process is ``idle()`` (no run in hand), every ``idle_every`` seconds: an idle worker's
    side tasks (its timed poll, reaper pass, webhook sweep, presence) now and then meet on a
    node, which opens a second connection there, and an idle fleet would otherwise hold those
    for up to ``every`` (docs/performance.md, fleet). A busy worker keeps its connections
    between commands, as before."""
    waited = 0.0
    while True:
        await asyncio.sleep(idle_every)
        waited += idle_every
        if waited >= every or idle():
            waited = 0.0
            await trim_idle(cluster)


def connect_node(cluster: AsyncRedisCluster, slot: int, **options: Any) -> aioredis.Redis:
    """A plain client of the node serving ``slot``, re-resolved on every new connection, with
    the cluster client's credentials; ``options`` as for a plain client (timeouts)."""
    credentials = {name: cluster.connection_kwargs.get(name) for name in ("username", "password")}
    pool = aioredis.ConnectionPool(
        connection_class=NodeConnection,
        resolve=node_resolver(cluster, slot),
        **credentials,
        **options,
    )
    return aioredis.Redis(connection_pool=pool)


__all__ = [
    "CLUSTER_SCHEME",
    "ClusterTarget",
    "NodeConnection",
    "connect_address",
    "connect_cluster",
    "connect_cluster_sync",
    "connect_node",
    "parse_cluster_url",
    "primaries_of",
    "trim_forever",
    "trim_idle",
]
