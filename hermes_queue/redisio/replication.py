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
import itertools
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from redis.asyncio.cluster import PipelineCommand, RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.redisio.redirections import redirection
from hermes_queue.redisio.switchover import (
    Deadline,
    NotApplied,
    refused_for_now,
    switchover_wait,
)

log = logging.getLogger(__name__)

# Pauses before sending a call again that was not applied (a moved slot, a script to load, a
# node that refused it for now or could not be reached), before the switchover wait applies.
_PAUSES = (0.0, 0.05, 0.1, 0.2, 0.4, 0.8)

# Loads of a script a call may need: one per node it meets that lacks it (a slot that moved
# during a switchover can meet two).
_LOADS = 3

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
    resend: bool = False,
) -> Any:
    """``script(keys, args)``; with ``replicas`` > 0, followed by ``WAIT replicas timeout_ms`` on
    the same connection. Too few acknowledgements raise :class:`NotReplicated` (``strict``)
    or are logged (a write nobody waits on, e.g. a worker's terminal transition: there is
    nothing to retry, and its lease makes a lost one run again).

    A call not applied is sent again: after the slot moved (a switchover), after the node
    answered ``NOSCRIPT`` (a promoted replica lacks the scripts: it is loaded there first),
    while a node refuses it for now or cannot be reached, for a few short pauses and then up
    to the client's ``redis_switchover_wait_seconds``. ``resend``: the script recognises its
    own earlier send with the same arguments (``runs/lua/create.lua``), so a call whose
    connection was cut after it was sent, which Redis may have applied, is sent again too,
    within the same wait; any other such call fails at once."""
    timeout_ms = WAIT_TIMEOUT_MS if timeout_ms is None else timeout_ms
    client = script.registered_client
    waited = Deadline(switchover_wait(client))
    loads = 0
    for tries in itertools.count(1):
        try:
            result, acknowledged = await _send(client, script, keys, args, replicas, timeout_ms)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            if isinstance(exc, NotApplied) and await _again(tries, waited):
                continue
            if resend and not isinstance(exc, NotApplied) and await waited.pause():
                log.info("sending %s again after an ambiguous failure: %r", script.sha, exc)
                continue
            raise
        if isinstance(result, NoScriptError):  # not run: load it where it was refused
            loads += 1
            if loads > _LOADS:
                raise NotApplied("script still missing after SCRIPT LOAD") from result
            try:
                await _load(client, script, keys[0])
            except (RedisConnectionError, RedisTimeoutError):
                if not await _again(tries, waited):
                    raise
            continue
        if _not_run(result):
            if await _again(tries, waited):  # the slot moved, or refused for now: again
                continue
        if isinstance(result, Exception):
            raise result
        if replicas <= 0:
            return result
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
    raise AssertionError("unreachable")


def _not_run(result: Any) -> bool:
    """Whether a script's reply says it did not run: a redirection or ``TRYAGAIN`` (in either
    form, ``redirections.py``), a refusal for now, or no connection."""
    if isinstance(result, NotApplied) or refused_for_now(result):
        return True
    return isinstance(result, ResponseError) and redirection(result) is not None


async def _again(tries: int, waited: Deadline) -> bool:
    """Whether a call that was not applied is sent again (after a pause): its first few sends
    whatever the switchover wait (a moved slot, a script to load), then within that wait."""
    if tries < len(_PAUSES):
        await asyncio.sleep(_PAUSES[tries])
        return True
    return await waited.pause()


async def _send(
    client: Any, script: AsyncScript, keys: list[Any], args: list[Any], replicas: int, wait_ms: int
) -> tuple[Any, Any]:
    """One send of the script (and ``WAIT``): its reply or error reply, and ``WAIT``'s."""
    if replicas <= 0:
        try:
            return await client.evalsha(script.sha, len(keys), *keys, *args), None
        except ResponseError as exc:  # NOSCRIPT, a refusal, or the script's own error
            return exc, None
    if isinstance(client, RedisCluster):
        return await _on_node(client, script, keys, args, replicas, wait_ms)
    pipe = client.pipeline(transaction=False)
    pipe.evalsha(script.sha, len(keys), *keys, *args)
    pipe.execute_command("WAIT", replicas, wait_ms)
    result, acknowledged = await pipe.execute(raise_on_error=False)
    return result, acknowledged


async def _load(client: Any, script: AsyncScript, key: Any) -> None:
    """Load ``script`` where a call naming ``key`` goes: on a cluster, the primary serving its
    slot (redis-py's ``SCRIPT LOAD`` goes to the primaries of a slot table that, during a
    switchover, may not name the promoted one yet). ``SCRIPT LOAD`` is idempotent: the cluster
    client sends it again after any failure."""
    if isinstance(client, RedisCluster):
        await client.initialize()
        node = client.get_node_from_key(key)
        await client.execute_command("SCRIPT LOAD", script.script, target_nodes=node)
    else:
        await client.script_load(script.script)


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
        raise NotApplied(f"no primary serves the slot of {keys[0]!r}")
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
    if _not_run(first):
        await _refresh(cluster)
    elif isinstance(first, RedisConnectionError | RedisTimeoutError):  # cut after it was sent
        await node.disconnect()
        await _refresh(cluster)
        raise first
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
    resend: Iterable[str] = (),
) -> dict[str, ScriptCall]:
    """The named scripts as ``await call(keys=…, args=…)`` (a registered script's signature)
    followed by ``WAIT``: :class:`NotReplicated` for ``strict`` ones, a warning for
    ``lenient`` ones. Those also named in ``resend`` recognise their own earlier send, so are
    sent again after an ambiguous failure (:func:`call_replicated`)."""
    again = frozenset(resend)
    calls: dict[str, ScriptCall] = {}
    for names, is_strict in ((strict, True), (lenient, False)):
        for name in names:
            calls[name] = functools.partial(
                call_replicated,
                scripts[name],
                replicas=replicas,
                strict=is_strict,
                resend=name in again,
            )
    return calls


__all__ = ["WAIT_TIMEOUT_MS", "NotReplicated", "acknowledged", "call_replicated"]
