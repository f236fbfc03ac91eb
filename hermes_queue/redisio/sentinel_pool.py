"""The connection pools of a Sentinel-watched primary, re-pointed after a failover without
closing a connection under anyone.

redis-py's ``SentinelConnectionPool``, when a connecting connection learns that the primary
changed, closes every idle connection (``disconnect(inuse_connections=False)``) in tasks that
run later: a caller that takes one of them meanwhile has it closed under its command (seen in a
planned switchover under load: uvloop's ``RuntimeError`` on the write, a 500, or a reply lost,
an ambiguous failure that is not sent again). Here a change of primary is only noted; each
connection is re-pointed by the caller that takes it next, before its first command
(:meth:`SentinelPool.ensure_connection`, :meth:`BoundedSentinelPool._points_elsewhere`). A
connection in use when the primary changes is left to its user: its next write is refused
``READONLY`` (``redisio/switchover.py``) or its connection is gone, and it reconnects then.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.connection import AbstractConnection
from redis.asyncio.sentinel import SentinelConnectionPool

from hermes_queue.redisio.pool import BoundedPool


class SentinelPool(SentinelConnectionPool):
    """redis-py's Sentinel pool that re-points an idle connection when it is next taken (not
    in a task of its own) and closes its Sentinel clients when closed for good."""

    async def get_master_address(self) -> Any:
        address = await self.sentinel_manager.discover_master(self.service_name)
        if self.is_master:
            self.master_address = address  # the idle connections follow when next taken
        return address

    def _points_elsewhere(self, connection: AbstractConnection) -> bool:
        """Whether ``connection`` is connected to a node other than the primary last named."""
        if not self.is_master or self.master_address is None or not connection.is_connected:
            return False
        # Both from the same answer: connect_to took the address discover_master gave.
        here: tuple[Any, Any] = (connection.host, connection.port)  # type: ignore[attr-defined]
        return bool(here != self.master_address)

    async def ensure_connection(self, connection: AbstractConnection) -> None:
        if self._points_elsewhere(connection):
            await connection.disconnect(nowait=True)  # idle: nothing of anyone's to finish
        await super().ensure_connection(connection)

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        if inuse_connections:
            for client in self.sentinel_manager.sentinels:
                await client.aclose()


class BoundedSentinelPool(SentinelPool, BoundedPool):
    """A bounded pool (callers wait for a connection) whose connections find the primary
    through Sentinel; :class:`BoundedPool` hands connections out, re-pointing them first."""


__all__ = ["BoundedSentinelPool", "SentinelPool"]
