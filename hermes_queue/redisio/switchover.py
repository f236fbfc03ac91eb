"""Calls that wait out a Redis primary switchover instead of failing, and only those that are
known not to have been applied.

While a primary is switched (``hermes-queue redis-switchover``, Sentinel's or a managed
service's failover) a call can fail in ways that say whether Redis applied it:

* **not applied**: the connection could not be made (refused, no primary named yet by the
  Sentinels, a timeout while connecting, the handshake cut): nothing was sent; or the node
  answered ``READONLY`` (it is a replica now: Redis refuses every write there, and a script
  stops at its first one, so nothing of it was applied) as the first reply read after the
  command was sent;
* **ambiguous**: the connection dropped or timed out after the command was sent: Redis may
  have applied it and the reply was lost.

Only the first kind is retried here, after a short pause, for up to ``redis_switchover_wait_
seconds`` from the first failure; redis-py then reconnects, and through Sentinel a new
connection asks which node is the primary, so the retry reaches the new one. An ambiguous
failure propagates at once (the API answers 503 ``redis_unavailable`` with ``Retry-After``, as
in an unplanned failover): retrying a run script that may already have run could, for
instance, create a run twice. A Redis Cluster's own retries are narrowed to the same rule
(:class:`SafeRetryCluster`); its redirections (``MOVED``, ``ASK``, ``TRYAGAIN``,
``CLUSTERDOWN``) are answers of a node that did not apply the command, which redis-py follows.

``READONLY`` arrives in two forms: Redis 7 answers a write (a script included) with it; Redis
6.2 runs a script on a replica until its first write and answers ``ERR Error running script …
-READONLY …``. redis-py's Sentinel connection turns the first into ``ConnectionError("The
previous master is now a slave")``; here both become :class:`NotApplied`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.asyncio.cluster import NodesManager, RedisCluster
from redis.asyncio.connection import Connection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import SentinelManagedConnection
from redis.backoff import NoBackoff
from redis.exceptions import (
    ClusterDownError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

T = TypeVar("T")

# Pauses between retries: short at first (a switch takes about a second), then at most this.
FIRST_PAUSE = 0.05
MAX_PAUSE = 0.5
_READONLY = "READONLY You can't write against a read only replica"


class NotApplied(RedisConnectionError):
    """A call Redis did not apply (no connection, or refused by a node that is a replica now):
    safe to send again. A ``ConnectionError``, so where it is not retried (or once the wait
    is over) it is answered as Redis being unavailable."""


class WaitingRetry(Retry):
    """redis-py's retry policy, bounded by time instead of a count: a failure of a type it
    supports (:class:`NotApplied`) is retried with a growing pause until ``wait_seconds``
    have passed since the first one."""

    __slots__ = ("_wait",)

    def __init__(self, wait_seconds: float) -> None:
        super().__init__(NoBackoff(), -1, supported_errors=(NotApplied,))
        self._wait = wait_seconds

    def __deepcopy__(self, memo: dict[int, Any]) -> WaitingRetry:  # redis-py copies it per pool
        return WaitingRetry(self._wait)

    async def call_with_retry(
        self, do: Callable[[], Awaitable[T]], fail: Callable[[RedisError], Any]
    ) -> T:
        deadline: float | None = None
        pause = FIRST_PAUSE
        while True:
            try:
                return await do()
            except self._supported_errors as error:
                await fail(error)
                now = time.monotonic()
                deadline = now + self._wait if deadline is None else deadline
                if now >= deadline:
                    raise
                await asyncio.sleep(min(pause, deadline - now))  # a last try at the deadline
                pause = min(pause * 2, MAX_PAUSE)


# Error replies of a node that did not apply the command and may accept it soon: a replica
# (READONLY), a cluster without a quorum or a primary for the slot (CLUSTERDOWN, MASTERDOWN), a
# slot being migrated (TRYAGAIN), a node loading its data (LOADING).
_REFUSALS = ("READONLY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "LOADING")


def refused_for_now(error: BaseException) -> bool:
    """Whether ``error`` is an error reply saying the command was not applied, for now: for
    callers whose calls go outside the pooled clients (a worker's pipelined appends)."""
    if not isinstance(error, ResponseError):
        return False
    message = str(error)
    return message.startswith(_REFUSALS) or _READONLY in message


def _readonly(error: BaseException) -> bool:
    if isinstance(error, ReadOnlyError):
        return True
    return isinstance(error, ResponseError) and _READONLY in str(error)


class _Classifying:
    """What :class:`SwitchoverConnection` and :class:`SwitchoverSentinelConnection` add to
    redis-py's connections: connection failures and a first-reply ``READONLY`` as
    :class:`NotApplied`."""

    # Replies read since the last command was sent: a READONLY after another reply may follow
    # a command that was applied (the node switched in between), so it is not retried.
    _replies_read: int = 0

    async def _base_connect(self) -> None:
        raise NotImplementedError

    async def _base_read(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def connect(self) -> None:
        try:
            await self._base_connect()
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            if isinstance(exc, NotApplied):
                raise
            raise NotApplied(f"not connected: {exc}") from exc
        except (AttributeError, RuntimeError) as exc:
            # redis-py's cluster client disconnects every node's connections when it rebuilds
            # its slot table (a failover), one being made included: its handshake then writes
            # to a writer already dropped (AttributeError) or a closed transport (uvloop's
            # RuntimeError). Nothing of a command was sent yet.
            raise NotApplied(f"connection closed while being made: {exc}") from exc

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        await super().send_packed_command(command, check_health)  # type: ignore[misc]
        self._replies_read = 0  # after the health check's PING, if any, was answered

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        first = self._replies_read == 0
        self._replies_read += 1
        try:
            response = await self._base_read(*args, **kwargs)
        except (ReadOnlyError, ResponseError) as exc:
            if not _readonly(exc):
                raise
            await self.disconnect()  # type: ignore[attr-defined]
            if first:
                raise NotApplied("the node is a replica now (READONLY)") from exc
            raise RedisConnectionError("the node became a replica mid-pipeline") from exc
        if first and isinstance(response, ResponseError) and _readonly(response):
            await self.disconnect()  # type: ignore[attr-defined]
            raise NotApplied("the node is a replica now (READONLY)") from response
        return response


class SwitchoverConnection(_Classifying, Connection):
    """A plain connection (``redis://``) whose failures say whether they were applied."""

    async def _base_connect(self) -> None:
        await Connection.connect(self)  # type: ignore[no-untyped-call]

    async def _base_read(self, *args: Any, **kwargs: Any) -> Any:
        return await Connection.read_response(self, *args, **kwargs)


class SwitchoverSentinelConnection(_Classifying, SentinelManagedConnection):
    """A connection to the primary a Sentinel names, whose failures say whether they were
    applied (redis-py's own READONLY handling, which hides the distinction, is bypassed)."""

    async def _base_connect(self) -> None:
        await SentinelManagedConnection.connect(self)  # type: ignore[no-untyped-call]

    async def _base_read(self, *args: Any, **kwargs: Any) -> Any:
        return await Connection.read_response(self, *args, **kwargs)


class SafeRetryCluster(RedisCluster):
    """redis-py's cluster client retries a command after any connection error or timeout,
    including one that may have been applied (a run script would then run twice); here only
    after failures known not applied: a connection not made, ``CLUSTERDOWN``, a slot not
    covered yet. Redirections are followed as before."""

    ERRORS_ALLOW_RETRY = (NotApplied, ClusterDownError, SlotNotCoveredError)  # type: ignore[assignment]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # redis-py takes no connection class for a cluster: set it where its nodes are built
        # (the nodes manager shares this dict) and on the seeds already built.
        self.connection_kwargs["connection_class"] = SwitchoverConnection
        for node in self.nodes_manager.startup_nodes.values():
            node.connection_class = SwitchoverConnection
        self.nodes_manager.__class__ = _RetriedRebuilds


_REBUILD_TRIES = 3


class _RetriedRebuilds(NodesManager):
    """redis-py's nodes manager, rebuilding its slot table during a failover, iterates its
    startup nodes across awaits while another rebuild, or a failed command dropping its node
    from them, changes that dict: ``RuntimeError: dictionary changed size during iteration``
    reached callers as a 500. A rebuild cut short that way is tried again; the last such
    failure is a connection error (nothing was sent). Set as the class of the client's own
    manager (redis-py takes no manager class; its slots leave no room for a wrapper)."""

    __slots__ = ()

    async def initialize(self) -> None:
        for attempt in range(_REBUILD_TRIES):
            try:
                await super().initialize()
                return
            except RuntimeError as exc:
                if attempt == _REBUILD_TRIES - 1:
                    raise NotApplied(f"slot table not rebuilt: {exc}") from exc


def switchover_options(wait_seconds: float) -> dict[str, Any]:
    """Connection options of a pooled client: its retry policy (none when ``wait_seconds``
    is 0)."""
    if wait_seconds <= 0:
        return {}
    return {"retry": WaitingRetry(wait_seconds), "retry_on_error": [NotApplied]}


__all__ = [
    "NotApplied",
    "SafeRetryCluster",
    "SwitchoverConnection",
    "SwitchoverSentinelConnection",
    "WaitingRetry",
    "refused_for_now",
    "switchover_options",
]
