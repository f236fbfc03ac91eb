"""Writes acknowledged only once replicated: a script call followed by ``WAIT``.

Redis replicates asynchronously, so a primary that dies can take its last writes with it, and
Sentinel promotes a replica that never saw them. With ``redis_min_replicas`` = n > 0 the writes
a client is told about (run creation, stop, an approval answer, the terminal transition) are
followed by ``WAIT n timeout`` on the same connection, in the same round trip (a pipeline, not
a transaction): Redis answers ``WAIT`` once n replicas acknowledged everything written on that
connection so far, which includes the script's writes. On a Redis Cluster both go to the primary
serving the script's slot, on one of its connections.

When fewer replicas acknowledge within :data:`WAIT_TIMEOUT_MS` the write still happened on the
primary (Redis cannot take it back): :class:`NotReplicated` then says so. It is a redis-py
``TimeoutError``, so the API answers 503 ``redis_unavailable`` as for any Redis outage; the run,
stop or answer stands on the primary. A retried stop or answer finds it done; a retried run
creation replays the run when it carries the same ``Idempotency-Key`` (the key keeps the run it
created), and starts a second run without one.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from redis.asyncio.cluster import PipelineCommand, RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import AskError, MovedError, NoScriptError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.redisio.switchover import NotApplied, refused_for_now

log = logging.getLogger(__name__)

# Pauses before sending a call again that a node refused for now (or could not be reached).
_PAUSES = (0.0, 0.05, 0.1, 0.2, 0.4, 0.8)

# How long a write waits for its replicas: a healthy replica acknowledges within a round trip,
# so this only bounds how long a client waits while the replicas are away.
WAIT_TIMEOUT_MS = 2_000


class NotReplicated(RedisTimeoutError):
    """The write was applied on the primary, but fewer replicas than asked acknowledged it."""

    def __init__(self, result: Any, acknowledged: int, wanted: int) -> None:
        super().__init__(f"write acknowledged by {acknowledged} of {wanted} replica(s)")
        self.result = result
        self.acknowledged = acknowledged
        self.wanted = wanted


async def call_replicated(
    script: AsyncScript,
    *,
    keys: list[Any],
    args: list[Any],
    replicas: int,
    strict: bool = True,
    timeout_ms: int | None = None,
) -> Any:
    """``script(keys, args)``; with ``replicas`` > 0, followed by ``WAIT replicas timeout_ms`` on
    the same connection. Too few acknowledgements raise :class:`NotReplicated` (``strict``)
    or are logged (a write nobody waits on, e.g. a worker's terminal transition: there is
    nothing to retry, and its lease makes a lost one run again)."""
    if replicas <= 0:
        return await script(keys=keys, args=args)
    timeout_ms = WAIT_TIMEOUT_MS if timeout_ms is None else timeout_ms
    client = script.registered_client
    # A call not applied is sent again: once for each of the slot moving (a switchover) and
    # the new node lacking the script; on a cluster also while a node refuses it for now.
    for pause in _PAUSES:
        if isinstance(client, RedisCluster):
            result, acknowledged = await _on_node(client, script, keys, args, replicas, timeout_ms)
        else:
            pipe = client.pipeline(transaction=False)
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            pipe.execute_command("WAIT", replicas, timeout_ms)
            result, acknowledged = await pipe.execute(raise_on_error=False)
        if isinstance(result, NoScriptError):  # not run: load it (a restart, a new primary)
            await client.script_load(script.script)
            continue
        if isinstance(result, MovedError | AskError):  # the slot moved (table refreshed): again
            continue
        if isinstance(result, NotApplied) or refused_for_now(result):
            await asyncio.sleep(pause)
            continue
        if isinstance(result, Exception):
            raise result
        if isinstance(acknowledged, Exception):
            # The script was applied; WAIT was refused (the node became a replica under it:
            # a switchover): whether a replica has the write is not known.
            if strict:
                raise NotReplicated(result, 0, replicas) from acknowledged
            log.warning("write applied, its replication unknown: %r", acknowledged)
            return result
        if int(acknowledged) < replicas:
            if strict:
                raise NotReplicated(result, int(acknowledged), replicas)
            log.warning("write acknowledged by %s of %d replica(s)", acknowledged, replicas)
        return result
    if isinstance(result, Exception):  # moved again, or still missing after SCRIPT LOAD
        raise result
    raise NoScriptError("script missing right after SCRIPT LOAD")


async def _on_node(
    cluster: RedisCluster,
    script: AsyncScript,
    keys: list[Any],
    args: list[Any],
    replicas: int,
    timeout_ms: int,
) -> tuple[Any, Any]:
    """On a Redis Cluster: the script and ``WAIT`` on one connection of the primary serving
    the script's slot (the cluster client would route ``WAIT``, which names no key, anywhere).
    A lost connection refreshes the slot table before it raises, so a retry after a failover
    reaches the promoted replica."""
    await cluster.initialize()
    node = cluster.get_node_from_key(keys[0])
    if node is None:
        raise RedisConnectionError(f"no primary serves the slot of {keys[0]!r}")
    commands = [
        PipelineCommand(0, "EVALSHA", script.sha, len(keys), *keys, *args),
        PipelineCommand(1, "WAIT", replicas, timeout_ms),
    ]
    try:
        await node.execute_pipeline(commands)
    except NotApplied as exc:  # not connected: nothing was sent
        await node.disconnect()
        await _refresh(cluster)
        return exc, None
    except (RedisConnectionError, RedisTimeoutError, OSError):
        await node.disconnect()
        await _refresh(cluster)
        raise
    first = commands[0].result
    if isinstance(first, MovedError | AskError | NotApplied) or refused_for_now(first):
        await _refresh(cluster)
    return first, commands[1].result


# One refresh of a cluster client's slot table at a time: redis-py's refresh iterates the seed
# nodes while its command path may drop one, which fails a concurrent refresh.
_refreshing: weakref.WeakKeyDictionary[RedisCluster, asyncio.Lock] = weakref.WeakKeyDictionary()


async def _refresh(cluster: RedisCluster) -> None:
    lock = _refreshing.setdefault(cluster, asyncio.Lock())
    async with lock:
        try:
            await cluster.nodes_manager.initialize()
        except RuntimeError:  # a seed dropped meanwhile ("dictionary changed size"): again
            await cluster.nodes_manager.initialize()


ScriptCall = Callable[..., Awaitable[Any]]


def acknowledged(
    scripts: Mapping[str, AsyncScript],
    replicas: int,
    *,
    strict: Iterable[str] = (),
    lenient: Iterable[str] = (),
) -> dict[str, ScriptCall]:
    """The named scripts as ``await call(keys=…, args=…)`` (a registered script's signature)
    followed by ``WAIT``: :class:`NotReplicated` for ``strict`` ones, a warning for
    ``lenient`` ones."""
    calls: dict[str, ScriptCall] = {}
    for names, is_strict in ((strict, True), (lenient, False)):
        for name in names:
            calls[name] = functools.partial(
                call_replicated, scripts[name], replicas=replicas, strict=is_strict
            )
    return calls


__all__ = ["WAIT_TIMEOUT_MS", "NotReplicated", "acknowledged", "call_replicated"]
