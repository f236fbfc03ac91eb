"""One Redis connection that many coroutines pipeline their calls on: the worker's append path.

Written by hand for latency: through redis-py's pool every call pays extra event-loop turns
before its bytes leave (the pool's ``can_read_destructive`` check is a read under a zero timeout,
and each send runs in a ``wait_for`` task). In a busy worker each turn waits behind every
other ready callback, so at ~1,000 events/s those turns were most of the worker → Redis leg of
event latency (~1–1.5 ms of a ~3.5 ms p50, see docs/performance.md). Here a call writes its
command at once and awaits a future; one reader task resolves the futures in reply order
(Redis answers a connection's commands in the order it got them), so calls from many runs
share a connection without taking turns.

Failure handling stays simple because every caller's command is idempotent on retry (the
append script dedupes by batch token): a lost connection, or a reply not back within
``timeout``, fails every call in flight with redis-py's ``ConnectionError``/``TimeoutError``
and the next call reconnects. An error reply, or an argument that cannot be encoded, fails only
its own call.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.commands.core import AsyncScript
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.redisio.addresses import host_and_port
from hermes_queue.redisio.cluster import DEFAULT_PORT, Address, connect_address, connect_node
from hermes_queue.redisio.redirections import redirection
from hermes_queue.redisio.switchover import NotApplied

log = logging.getLogger(__name__)


def dedicated_connection(redis: Redis, client_name: str, **overrides: Any) -> AbstractConnection:
    """A connection outside ``redis``'s pool, with its settings but no per-send timeout task,
    no retries and no health checks: its owner times its reads itself."""
    pool = redis.connection_pool
    kwargs = dict(pool.connection_kwargs)
    kwargs.update(
        overrides,
        client_name=client_name,
        socket_timeout=None,
        retry_on_timeout=False,
        retry_on_error=[],
        retry=None,
        health_check_interval=0,
    )
    connection: AbstractConnection = pool.connection_class(**kwargs)
    return connection


class PipelinedConnection:
    """``await call(*args)`` from any number of coroutines; ``aclose()`` when done."""

    def __init__(self, redis: Redis, client_name: str, *, timeout: float = 5.0) -> None:
        self.redis = redis
        self.client_name = client_name
        self.timeout = timeout
        self._conn: AbstractConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._connecting = asyncio.Lock()
        self._closing: set[asyncio.Future[None]] = set()  # disconnects under way
        self.closed = False

    async def call(self, *args: Any) -> Any:
        """Send one command and return its reply; an error reply raises as redis-py would."""
        return await self._await((await self._send(args))[0])

    async def call_asking(self, *args: Any) -> Any:
        """``ASKING`` then one command, back to back on this connection (``ASKING`` holds for
        the next command the connection sends, and another caller's could come between two
        sends): the command's reply. A node importing a slot serves its keys only so."""
        asking, reply = await self._send(("ASKING",), args)
        await self._await(asking)
        return await self._await(reply)

    async def evalsha(
        self, script: AsyncScript, keys: list[Any], args: list[Any], *, asking: bool = False
    ) -> Any:
        """Run a registered script; one that the node no longer has (a restart, ``SCRIPT
        FLUSH``, a replica just promoted: scripts are not replicated) is loaded on this
        connection, so on the very node that answered ``NOSCRIPT``, and sent again (nothing
        ran on ``NOSCRIPT``). Through the process's pooled client it could be loaded on
        another node than the one the call reaches while a slot table is being refreshed.
        ``asking``: sent after ``ASKING`` (a slot being migrated here, ``SlotPipelines``)."""
        send = self.call_asking if asking else self.call
        try:
            return await send("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            await self.call("SCRIPT", "LOAD", script.script)
            return await send("EVALSHA", script.sha, len(keys), *keys, *args)

    async def _send(self, *commands: tuple[Any, ...]) -> list[asyncio.Future[Any]]:
        """Write ``commands`` in one send; a future per command for its reply."""
        conn = self._conn
        if conn is None or self._reader is None:
            conn = await self._connected()
        # Encoded before anything is queued: an argument that cannot be encoded (a lone surrogate,
        # a value of no Redis type) fails this call alone, never the connection others share.
        packed = conn.pack_commands(commands)
        loop = asyncio.get_running_loop()
        replies: list[asyncio.Future[Any]] = [loop.create_future() for _ in commands]
        # Queue the futures and write the bytes with no await in between, so the futures are in
        # the order the commands reach the socket whatever other callers do.
        self._pending.extend(replies)
        try:
            await conn.send_packed_command(packed, check_health=False)
        except Exception as exc:
            self._fail_all(exc)
            for reply in replies:  # this call raises instead of handing them out: taken here
                if reply.done() and not reply.cancelled():
                    reply.exception()  # or asyncio logs "exception was never retrieved"
            raise RedisConnectionError(f"send failed: {exc!r}") from exc
        return replies

    async def _await(self, reply: asyncio.Future[Any]) -> Any:
        try:
            async with asyncio.timeout(self.timeout):
                return await reply  # a cancelled caller's reply is skipped by the reader
        except TimeoutError:
            # The replies on this connection can no longer be matched to their calls.
            self._fail_all(RedisTimeoutError(f"no reply within {self.timeout}s"))
            raise RedisTimeoutError(f"no reply within {self.timeout}s") from None

    async def aclose(self) -> None:
        self.closed = True
        self._fail_all(RedisConnectionError("connection closed"))
        if self._closing:
            await asyncio.wait(self._closing, timeout=self.timeout)

    # -- internals ---------------------------------------------------------------------------
    async def _connected(self) -> AbstractConnection:
        async with self._connecting:
            if self.closed:
                raise RedisConnectionError("connection closed")
            if self._conn is None or self._reader is None:
                conn = dedicated_connection(self.redis, self.client_name)
                async with asyncio.timeout(self.timeout):
                    await conn.connect()  # type: ignore[no-untyped-call]
                self._conn = conn
                self._reader = asyncio.create_task(self._read(conn), name=self.client_name)
            return self._conn

    async def _read(self, conn: AbstractConnection) -> None:
        try:
            while True:
                try:
                    value: Any = await conn.read_response(disconnect_on_error=False)
                except ResponseError as exc:  # an error reply: that call's alone
                    value = exc
                if not self._pending:
                    raise RedisConnectionError("reply with no call waiting for it")
                waiter = self._pending.popleft()
                if waiter.done():  # its caller was cancelled
                    continue
                if isinstance(value, Exception):
                    waiter.set_exception(value)
                else:
                    waiter.set_result(value)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s: connection lost: %r", self.client_name, exc)
            if self._conn is conn:  # not a connection already replaced
                self._fail_all(exc, reading=True)

    def _fail_all(self, exc: BaseException, *, reading: bool = False) -> None:
        """Drop the connection and fail every call in flight (their replies are lost)."""
        conn, reader = self._conn, self._reader
        self._conn = self._reader = None
        if reader is not None and not reading:
            reader.cancel()
        if conn is not None:
            self._closing.add(asyncio.ensure_future(conn.disconnect(nowait=True)))
            for task in list(self._closing):
                if task.done():
                    self._closing.discard(task)
        # The others' commands were written before: whatever this failure says of its own
        # command, theirs may have been applied (never NotApplied).
        lost = isinstance(exc, RedisConnectionError | RedisTimeoutError)
        error = exc if lost and not isinstance(exc, NotApplied) else None
        while self._pending:
            waiter = self._pending.popleft()
            if not waiter.done():
                waiter.set_exception(error or RedisConnectionError(f"connection lost: {exc!r}"))


# A slot being moved (``CLUSTER SETSLOT … MIGRATING``, ``redis-cli --cluster reshard``): how long
# a call keeps asking again while the slot's keys are split between two nodes (``TRYAGAIN``)
# or the cluster is settling (``CLUSTERDOWN``), and how often; nothing ran on such a reply.
SETTLE_SECONDS = 10.0
SETTLE_EVERY = 0.05


class SlotPipelines:
    """``PipelinedConnection``'s script calls on a Redis Cluster: one pipelined connection per
    slot written to (one per shard, keys.py), to the primary serving it, so the worker's appends
    keep their latency there. A connection lost (a failover) fails its calls as on one primary
    (the callers retry; every call is idempotent) and the next call connects to the node serving
    the slot then (``redisio.cluster.connect_node`` refreshes the slot table).

    A reply that the slot is elsewhere means nothing ran, and the call is sent on as Redis
    Cluster's redirections say (redis.io, cluster spec, "ASK redirection"): ``MOVED`` (the slot
    has a new owner) on a new connection to the node it names; ``ASK`` (a slot being migrated,
    this key already gone to the node it names) to that node after ``ASKING``, this call only,
    the slot's connection left where it is (its other keys are still served here); ``TRYAGAIN``
    (a call whose keys are split by the migration) and ``CLUSTERDOWN`` again after a pause,
    for up to :data:`SETTLE_SECONDS`."""

    def __init__(self, cluster: Any, client_name: str) -> None:
        self.cluster = cluster
        self.client_name = client_name
        self._by_slot: dict[int, PipelinedConnection] = {}
        # Kept across dropped connections: its resolver knows where a MOVED said the slot went.
        self._nodes: dict[int, Redis] = {}
        # A slot's connection to the node importing it, for ASK, while it is migrated.
        self._asked: dict[int, tuple[Address, PipelinedConnection]] = {}
        # Connections retired after a MOVED, closed a timeout later (their closers).
        self._retiring: set[PipelinedConnection] = set()
        self._closers: set[asyncio.Task[None]] = set()
        self.redirections: collections.Counter[str] = collections.Counter()

    async def evalsha(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> Any:
        slot = int(key_slot(str(keys[0]).encode()))
        loop = asyncio.get_running_loop()
        settle_by = loop.time() + SETTLE_SECONDS
        ask: Address | None = None
        while True:
            conn = self._connection(slot) if ask is None else self._ask_connection(slot, ask)
            try:
                return await conn.evalsha(script, keys, args, asking=ask is not None)
            except ResponseError as exc:
                moved = redirection(exc)
                if moved is None or loop.time() > settle_by:
                    raise
                self.redirections[moved.kind] += 1
                ask = None
                if moved.kind == "MOVED":  # the slot has another owner: this connection goes
                    self._retire(slot, conn)
                elif moved.kind == "ASK":
                    ask = host_and_port(moved.address, DEFAULT_PORT, "ASK address")
                else:
                    if moved.kind == "CLUSTERDOWN":  # a node cut off: ask the cluster again
                        await self._drop(slot, conn)
                    await asyncio.sleep(SETTLE_EVERY)
            except (RedisConnectionError, RedisTimeoutError):
                await self._drop(slot, conn)
                raise

    def _connection(self, slot: int) -> PipelinedConnection:
        conn = self._by_slot.get(slot)
        if conn is None:
            node = self._nodes.get(slot)
            if node is None:
                node = self._nodes[slot] = connect_node(self.cluster, slot)
            conn = self._by_slot[slot] = PipelinedConnection(node, f"{self.client_name}:{slot}")
        return conn

    def _ask_connection(self, slot: int, address: Address) -> PipelinedConnection:
        held = self._asked.get(slot)
        if held is not None and held[0] == address:
            return held[1]
        if held is not None:
            self._retire(slot, held[1])
        node = connect_address(self.cluster, address)
        conn = PipelinedConnection(node, f"{self.client_name}:{slot}:asked")
        self._asked[slot] = (address, conn)
        return conn

    def _retire(self, slot: int, conn: PipelinedConnection) -> None:
        """``conn`` answered that the slot moved: the slot's next call gets a new connection
        (and a ``MOVED`` on the slot's own connection ends its migration: its ``ASK``
        connection goes too). A connection is closed once the calls in flight on it have their
        replies (they were sent before the move, are answered ``MOVED`` too and sent on as
        this one was; closing at once would fail them as a lost connection). Only the
        connection that answered is retired, not one another caller has opened since."""
        retired: list[PipelinedConnection] = []
        held = self._asked.get(slot)
        if self._by_slot.get(slot) is conn:
            retired.append(self._by_slot.pop(slot))
            if held is not None:
                retired.append(self._asked.pop(slot)[1])
        elif held is not None and held[1] is conn:
            retired.append(self._asked.pop(slot)[1])
        for old in retired:
            self._retiring.add(old)
            task = asyncio.create_task(self._close_later(old))
            self._closers.add(task)
            task.add_done_callback(self._closers.discard)

    async def _close_later(self, conn: PipelinedConnection) -> None:
        await asyncio.sleep(conn.timeout)  # by then every call on it has a reply or timed out
        await self._close(conn)

    async def _close(self, conn: PipelinedConnection) -> None:
        self._retiring.discard(conn)
        await conn.aclose()
        if not any(conn.redis is node for node in self._nodes.values()):  # an ASK one's own
            await conn.redis.aclose()

    async def _drop(self, slot: int, conn: PipelinedConnection) -> None:
        """``conn`` closed at once (lost, or its node cut off): its calls fail as lost."""
        if self._by_slot.get(slot) is conn:
            del self._by_slot[slot]
        held = self._asked.get(slot)
        if held is not None and held[1] is conn:
            del self._asked[slot]
        await self._close(conn)

    async def aclose(self) -> None:
        for slot, conn in list(self._by_slot.items()):
            await self._drop(slot, conn)
        for slot, (_, conn) in list(self._asked.items()):
            await self._drop(slot, conn)
        for task in list(self._closers):
            task.cancel()
        await asyncio.gather(*self._closers, return_exceptions=True)
        for conn in list(self._retiring):
            await self._close(conn)
        for node in self._nodes.values():
            await node.aclose()
        self._nodes.clear()
