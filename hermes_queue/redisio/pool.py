"""The bounded connection pool every pooled client uses (``redisio.connect.connect``).

Written here instead of using redis-py's ``BlockingConnectionPool`` (5.3), for what each call
costs: that pool takes an ``asyncio.Condition`` on every get and every release, and checks each
connection before use by reading its socket with a zero timeout, which always costs a trip
through the event loop. On a busy API each lock hand-off and each check is a loop iteration
(under 512 streaming clients, 2,590 gets waited over 1 ms, p50 11 ms, while the loop lagged
0.3 ms at p50), and a pooled call cost its caller 25–45 % more CPU than here
(``bench/pool_cost.py``; redis-py issue #3692 reports the lock contention). Here:

- a free connection is taken without awaiting anything; a new one is made while fewer than
  ``max_connections`` exist; otherwise the caller waits, first come first served, up to
  ``timeout`` seconds (then ``ConnectionError``, as redis-py's pool raises);
- a released connection goes straight to the oldest waiter, still open;
- before use, a connection the server closed (a restart, ``CLIENT KILL``, an idle timeout) is
  recognised by what the loop already read from it (end of stream, or a transport error) and
  reconnected, without polling the socket. A connection left with a reply unread is already
  closed by redis-py when its command was cancelled or failed, so it reconnects here too; so
  does one still connected to a former primary after a Sentinel failover
  (``redisio/sentinel_pool.py``: re-pointed by the caller that takes it, never closed under one).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.event import AsyncAfterConnectionReleasedEvent
from redis.exceptions import ConnectionError as RedisConnectionError


class BoundedPool(aioredis.ConnectionPool):
    """At most ``max_connections`` connections; callers wait for one rather than open more."""

    def __init__(
        self, max_connections: int = 50, timeout: float | None = 20.0, **kwargs: Any
    ) -> None:
        super().__init__(max_connections=max_connections, **kwargs)
        self.timeout = timeout
        self._waiters: deque[asyncio.Future[AbstractConnection]] = deque()

    async def get_connection(self, *_args: Any, **_options: Any) -> AbstractConnection:
        connection = self._take()
        if connection is None:
            connection = await self._wait()
        try:
            # A connection that cannot be made sent nothing: the connection's retry policy
            # (``redisio.switchover``) may wait for a primary being switched.
            retry: Any = connection.retry
            await retry.call_with_retry(
                lambda: self._make_ready(connection), lambda _error: asyncio.sleep(0)
            )
        except BaseException:
            await self.release(connection)
            raise
        return connection

    async def release(self, connection: AbstractConnection) -> None:
        try:
            # redis-py's hook (re-authentication with streaming credentials), run while the
            # connection is still the releaser's.
            if self._event_dispatcher is not None:
                event = AsyncAfterConnectionReleasedEvent(connection)  # type: ignore[no-untyped-call]
                await self._event_dispatcher.dispatch_async(event)
        finally:
            self._hand_over(connection)

    # -- internals ---------------------------------------------------------------------------
    def _take(self) -> AbstractConnection | None:
        """A free or new connection, now in use; None when the caller must wait its turn."""
        if self._available_connections:
            connection = self._available_connections.pop()
        elif len(self._in_use_connections) < self.max_connections:
            connection = self.make_connection()  # type: ignore[no-untyped-call]
        else:
            return None
        self._in_use_connections.add(connection)
        return connection

    async def _wait(self) -> AbstractConnection:
        waiter: asyncio.Future[AbstractConnection] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(self.timeout):
                return await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                # Handed over just as this caller gave up (timed out, cancelled): pass it on.
                self._hand_over(waiter.result())
            else:
                waiter.cancel()  # a later hand-over skips it
            if isinstance(exc, TimeoutError):
                raise RedisConnectionError("No connection available.") from None
            raise

    def _hand_over(self, connection: AbstractConnection) -> None:
        """Give ``connection`` to the oldest caller still waiting, else back to the free list.
        Raises ``KeyError`` for a connection this pool did not hand out, as redis-py's does."""
        self._in_use_connections.remove(connection)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._in_use_connections.add(connection)
                waiter.set_result(connection)
                return
        self._available_connections.append(connection)

    def _points_elsewhere(self, connection: AbstractConnection) -> bool:
        """Whether ``connection`` is connected to a node that is no longer the one to use (a
        former primary: ``redisio/sentinel_pool.py``); such a connection is made again before
        it is handed out."""
        return False

    async def _make_ready(self, connection: AbstractConnection) -> None:
        if connection.is_connected:
            if not _closed_by_server(connection) and not self._points_elsewhere(connection):
                return
            await connection.disconnect(nowait=True)  # nothing of anyone's to finish on it
        await _connect(connection)


async def _connect(connection: AbstractConnection) -> None:
    """Connect, or leave the connection closed: redis-py keeps one whose handshake (``AUTH``,
    ``CLIENT SETNAME``, ``SELECT``) a cancellation cut short looking connected, and the next
    caller would then send commands on it unauthenticated."""
    try:
        await connection.connect()  # type: ignore[no-untyped-call]
    except BaseException:
        await connection.disconnect(nowait=True)
        raise


def _closed_by_server(connection: AbstractConnection) -> bool:
    """Whether the loop has already seen this connection end (end of stream or an error).
    ``_reader`` is redis-py's ``asyncio.StreamReader`` of the connection (set while
    connected); tests/redisio/test_pool.py fails if that stops being so."""
    reader: asyncio.StreamReader | None = getattr(connection, "_reader", None)
    return reader is None or reader.at_eof() or reader.exception() is not None
