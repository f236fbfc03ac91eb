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

The first kind is retried, after a short pause, for up to ``redis_switchover_wait_seconds``
from the first failure; redis-py then reconnects, and through Sentinel a new connection asks
which node is the primary, so the retry reaches the new one. The second kind is sent again only
when that is safe: a script that recognises its own earlier send (the run creations:
``redisio/replication.py``, ``runs/lua/create.lua``) and, on a Redis Cluster, whose
``CLUSTER FAILOVER`` cuts the clients it paused, a command that changes nothing
(:data:`RESENDABLE`: reads, ``SCRIPT LOAD``; ``redisio/cluster_retry.py``). Any other
ambiguous failure propagates at once (the API answers 503 ``redis_unavailable`` with
``Retry-After``, as in an unplanned failover): a claim or a stop sent again could be applied
twice. A Redis Cluster's own retries are narrowed to the same rule
(``cluster_retry.SafeRetryCluster``); its redirections (``MOVED``, ``ASK``, ``TRYAGAIN``,
``CLUSTERDOWN``) are answers of a node that did not apply the command, which redis-py follows.

``READONLY`` arrives in two forms: Redis 7 answers a write (a script included) with it; Redis
6.2 runs a script on a replica until its first write and answers ``ERR Error running script …
-READONLY …``. redis-py's Sentinel connection turns the first into ``ConnectionError("The
previous master is now a slave")``; here both become :class:`NotApplied`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis.asyncio.connection import Connection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import SentinelManagedConnection
from redis.backoff import NoBackoff
from redis.commands.cluster import READ_COMMANDS
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, RedisError, ResponseError
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


class Deadline:
    """The pauses between the sends of one call that failed without effect (or that is safe to
    send again): short at first (a switch takes about a second), then at most
    :data:`MAX_PAUSE`, until ``wait_seconds`` have passed since the first failure."""

    def __init__(self, wait_seconds: float) -> None:
        self.wait_seconds = wait_seconds
        self._until: float | None = None
        self._pause = FIRST_PAUSE

    async def pause(self) -> bool:
        """Sleep before the next send; False (no sleep) once the wait is over."""
        now = time.monotonic()
        if self._until is None:
            self._until = now + self.wait_seconds
        if now >= self._until:
            return False
        await asyncio.sleep(min(self._pause, self._until - now))  # a last try at the deadline
        self._pause = min(self._pause * 2, MAX_PAUSE)
        return True


class WaitingRetry(Retry):
    """redis-py's retry policy, bounded by time instead of a count: a failure of a type it
    supports (:class:`NotApplied`) is retried with a growing pause until ``wait_seconds``
    have passed since the first one."""

    __slots__ = ("wait_seconds",)

    def __init__(self, wait_seconds: float) -> None:
        super().__init__(NoBackoff(), -1, supported_errors=(NotApplied,))
        self.wait_seconds = wait_seconds

    def __deepcopy__(self, memo: dict[int, Any]) -> WaitingRetry:  # redis-py copies it per pool
        return WaitingRetry(self.wait_seconds)

    async def call_with_retry(
        self, do: Callable[[], Awaitable[T]], fail: Callable[[RedisError], Any]
    ) -> T:
        waited = Deadline(self.wait_seconds)
        while True:
            try:
                return await do()
            except self._supported_errors as error:
                await fail(error)
                if not await waited.pause():
                    raise


# Commands that change nothing, so are sent again after any failure, even one after which
# the node may have run them (a connection cut while the reply was on its way): reads of
# records, streams and queues, and loading a script (idempotent).
RESENDABLE = READ_COMMANDS | frozenset(
    {
        "ECHO",
        "HRANDFIELD",
        "INFO",
        "LPOS",
        "PING",
        "SCRIPT EXISTS",
        "SCRIPT LOAD",
        "SMISMEMBER",
        "TYPE",
        "XINFO STREAM",
        "XLEN",
        "XRANGE",
        "XREAD",
        "XREVRANGE",
        "ZMSCORE",
        "ZRANGEBYSCORE",
        "ZRANK",
        "ZREVRANGE",
        "ZREVRANGEBYSCORE",
        "ZREVRANK",
    }
)


def resendable(args: Sequence[Any]) -> bool:
    """Whether the command ``args`` (as redis-py packs it: the name first, a two-word one as
    one string) changes nothing and may be sent again whatever became of the first send."""
    name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
    return name.upper() in RESENDABLE


def switchover_wait(client: object) -> float:
    """How long ``client`` (one of ``redisio.connect``'s) waits out a switchover: its
    ``redis_switchover_wait_seconds``, 0 when it does not wait."""
    wait = getattr(client, "switchover_wait", None)  # a cluster client (redisio/cluster_retry.py)
    if isinstance(wait, int | float):
        return float(wait)
    pool = getattr(client, "connection_pool", None)
    retry = pool.connection_kwargs.get("retry") if pool is not None else None
    return retry.wait_seconds if isinstance(retry, WaitingRetry) else 0.0


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


def _closed_before_written(error: BaseException) -> bool:
    """Whether ``error``, raised by a connection's write, says its connection was closed under it
    before anything was written: another task closed it (redis-py's Sentinel pool closing idle
    connections, its cluster client dropping every node's) while this one was between taking it
    and writing, a window Python 3.11's ``wait_for`` opens by running the write in a task of its
    own. Then the writer is gone (redis-py's ``_writer`` is None) or the transport is closed, and
    uvloop refuses the write before buffering anything (asyncio's loop drops the bytes and raises
    ``ConnectionResetError`` instead: an ambiguous failure, as any lost connection)."""
    if isinstance(error, AttributeError):
        return error.obj is None and error.name == "writelines"
    return isinstance(error, RuntimeError) and "handler is closed" in str(error)


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
        try:
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
        except (AttributeError, RuntimeError) as exc:
            if not _closed_before_written(exc):
                raise  # a fault of its own, not a connection closed under it: never retried
            raise NotApplied(f"connection closed before the command was written: {exc}") from exc
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


def switchover_options(wait_seconds: float) -> dict[str, Any]:
    """Connection options of a pooled client: its retry policy (none when ``wait_seconds``
    is 0)."""
    if wait_seconds <= 0:
        return {}
    return {"retry": WaitingRetry(wait_seconds), "retry_on_error": [NotApplied]}


__all__ = [
    "RESENDABLE",
    "Deadline",
    "NotApplied",
    "SwitchoverConnection",
    "SwitchoverSentinelConnection",
    "WaitingRetry",
    "refused_for_now",
    "resendable",
    "switchover_options",
    "switchover_wait",
]
