"""``hermes-queue redis-switchover``: a planned primary switch that costs no request and loses
no acknowledged write (docs/deploy.md, "Rollouts").

**Sentinel.** ``SENTINEL FAILOVER`` alone is not safe for a planned switch: it promotes a
replica without stopping the old primary, which goes on accepting writes until Sentinel turns
it into a replica some ten seconds later (measured: promotion 1.1 s, demotion 11.3 s after the
command), and those writes are then discarded; with ``redis_min_replicas`` they fail with 503
instead, as the old primary has no replica left to acknowledge them. Sentinel's own demotion
also kills every client connection (``CLIENT KILL TYPE normal``), cutting the commands in flight
in a way that leaves their clients unable to tell whether they were applied. So this command:

1. pauses writes on the primary (``CLIENT PAUSE … WRITE``): a write sent from now on waits
   there, unapplied (reads go on);
2. waits until every replica's acknowledged offset reaches the primary's, so the replica that
   will be promoted holds every write the primary acknowledged;
3. asks a Sentinel for the failover and waits until the Sentinels name a new primary that
   answers as one (about a second);
4. makes the old primary a replica of the new one itself (``REPLICAOF``), before Sentinel
   would, and lifts the pause: each write that waited is answered ``READONLY``, a refusal that
   proves it was not applied, which the hermes-queue clients retry on the new primary
   (``redisio/switchover.py``). Sentinel then finds the old primary already configured as it
   wants it and leaves its connections alone.

If the replicas do not catch up, nothing is switched and the pause is lifted. The pause is set
to end by itself after ``timeout``, so a command killed half-way never leaves the primary
paused for long.

**Cluster.** ``CLUSTER FAILOVER`` sent to a replica already does the safe thing (the primary
pauses its clients, the replica catches up and takes over, the paused commands are answered
``MOVED``, which the cluster clients follow); this command sends it to the replica named and
waits until the switch is complete.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from hermes_queue.config import RedisSettings
from hermes_queue.redisio.addresses import host_and_port
from hermes_queue.redisio.cluster import parse_cluster_url
from hermes_queue.redisio.connect import SENTINEL_TIMEOUT, SentinelTarget, parse_sentinel_url

Address = tuple[str, int]
Say = Callable[[str], None]
POLL_SECONDS = 0.01


class SwitchoverError(RuntimeError):
    """The switch could not be made safely; the message says what was (not) done."""


@dataclass(frozen=True)
class Switched:
    """What a switchover did: from which primary to which, and how long writes waited."""

    old: Address
    new: Address
    paused_seconds: float
    total_seconds: float


def _call(client: redis.Redis, *args: Any) -> Any:
    """A command on a synchronous client (redis-py's are untyped)."""
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _replication(node: redis.Redis) -> dict[str, Any]:
    return dict(_call(node, "INFO", "replication"))


def _until(what: str, check: Callable[[], Any], within: float) -> Any:
    """Poll ``check`` until it returns something truthy; SwitchoverError after ``within``."""
    deadline = time.monotonic() + within
    while True:
        try:
            found = check()
        except redis.RedisError:
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise SwitchoverError(f"timed out waiting for {what}")
        time.sleep(POLL_SECONDS)


class _SentinelGroup:
    """The Sentinels and data nodes of a ``redis+sentinel://`` URL, synchronously."""

    def __init__(self, target: SentinelTarget) -> None:
        self.target = target
        self.sentinels = [
            redis.Redis(host, port, socket_timeout=SENTINEL_TIMEOUT, socket_connect_timeout=1)
            for host, port in target.sentinels
        ]

    def primary(self) -> Address | None:
        for sentinel in self.sentinels:
            try:
                found = sentinel.sentinel_get_master_addr_by_name(  # type: ignore[no-untyped-call]
                    self.target.service
                )
            except redis.RedisError:
                continue
            if found:
                return _text(found[0]), int(found[1])
        return None

    def replicas(self) -> list[Address]:
        """Replicas the Sentinels see up and linked to the primary."""
        for sentinel in self.sentinels:
            try:
                found = sentinel.sentinel_slaves(self.target.service)  # type: ignore[no-untyped-call]
            except redis.RedisError:
                continue
            return [
                (_text(r["ip"]), int(r["port"]))
                for r in found
                if not ({"s_down", "o_down", "disconnected"} & set(r["flags"].split(",")))
                and r.get("master-link-status") == "ok"
            ]
        raise SwitchoverError("no Sentinel answers")

    def failover(self) -> None:
        for sentinel in self.sentinels:
            try:
                _call(sentinel, "SENTINEL", "FAILOVER", self.target.service)
                return
            except redis.ConnectionError:
                continue
        raise SwitchoverError("no Sentinel accepted SENTINEL FAILOVER")

    def node(self, address: Address, timeout: float) -> redis.Redis:
        kwargs = self.target.node_kwargs()
        return redis.Redis(
            address[0], address[1], socket_timeout=timeout, socket_connect_timeout=1, **kwargs
        )

    def close(self) -> None:
        for sentinel in self.sentinels:
            sentinel.close()


def _caught_up(primary: redis.Redis, replicas: list[Address]) -> bool:
    """Whether every replica acknowledged the primary's whole replication stream (writes are
    paused, so the primary's offset no longer moves)."""
    info = _replication(primary)
    target = int(info["master_repl_offset"])
    offsets = {
        (_text(value["ip"]), int(value["port"])): int(value["offset"])
        for key, value in info.items()
        if key.startswith("slave") and isinstance(value, dict)
    }
    return all(offsets.get(replica, -1) >= target for replica in replicas)


def _is_primary(node: redis.Redis) -> bool:
    return str(_replication(node)["role"]) == "master"


def sentinel_switchover(target: SentinelTarget, timeout: float, say: Say) -> Switched:
    """The Sentinel procedure of the module docstring."""
    group = _SentinelGroup(target)
    try:
        old = group.primary()
        if old is None:
            raise SwitchoverError("the Sentinels name no primary")
        try:  # a replica just restarted is seen healthy at the Sentinels' next look (~10 s)
            replicas = _until("a replica the Sentinels see healthy", group.replicas, timeout)
        except SwitchoverError:
            raise SwitchoverError(f"primary {old[0]}:{old[1]} has no healthy replica") from None
        with group.node(old, timeout) as primary:
            started = time.monotonic()
            _call(primary, "CLIENT", "PAUSE", int(timeout * 1000), "WRITE")
            paused = time.monotonic()
            say(f"writes paused on {old[0]}:{old[1]}")
            new = _switch(group, primary, old, replicas, timeout, say)
            ended = time.monotonic()
        say(f"{new[0]}:{new[1]} is the primary; {old[0]}:{old[1]} follows it")
        return Switched(old, new, ended - paused, ended - started)
    finally:
        group.close()


def _switch(
    group: _SentinelGroup,
    primary: redis.Redis,
    old: Address,
    replicas: list[Address],
    timeout: float,
    say: Say,
) -> Address:
    """Steps 2-4, writes paused on ``primary``. The pause is lifted unless the failover was
    asked for and no new primary appeared: then writes must not resume on the old primary
    (Sentinel may still promote a replica and discard them); the pause ends by itself."""
    asked, new = False, None
    try:
        _until("the replicas to catch up", lambda: _caught_up(primary, replicas), timeout / 4)
        group.failover()
        asked = True
        say("failover asked of the Sentinels")
        new = _until("a new primary", lambda: _promoted(group, old, timeout), timeout / 2)
        _call(primary, "REPLICAOF", new[0], new[1])
        return new  # type: ignore[no-any-return]
    except SwitchoverError as exc:
        if asked:
            raise SwitchoverError(
                f"{exc}; the failover was asked for: check the Sentinels "
                f"(writes on {old[0]}:{old[1]} stay paused until the pause ends)"
            ) from None
        raise SwitchoverError(f"{exc}; nothing was switched") from None
    finally:
        if new is not None or not asked:
            _call(primary, "CLIENT", "UNPAUSE")


def _promoted(group: _SentinelGroup, old: Address, timeout: float) -> Address | None:
    new = group.primary()
    if new is None or new == old:
        return None
    with group.node(new, timeout) as node:
        return new if _is_primary(node) else None


def cluster_switchover(
    settings: RedisSettings, replica: Address, timeout: float, say: Say
) -> Switched:
    """``CLUSTER FAILOVER`` on ``replica`` (the coordinated kind), then wait for it to serve."""
    target = parse_cluster_url(settings.url)
    assert target is not None
    node = redis.Redis(
        replica[0],
        replica[1],
        username=target.username,
        password=target.password,
        socket_timeout=timeout,
        socket_connect_timeout=1,
    )
    with node:
        info = _replication(node)
        if info["role"] != "slave":
            raise SwitchoverError(f"{replica[0]}:{replica[1]} is not a replica")
        old = (_text(info["master_host"]), int(info["master_port"]))
        started = time.monotonic()
        _call(node, "CLUSTER", "FAILOVER")
        say(f"CLUSTER FAILOVER sent to {replica[0]}:{replica[1]}")
        _until("the replica to take over", lambda: _is_primary(node), timeout)
        _until(
            "the cluster to agree",
            lambda: "cluster_state:ok" in _text(_call(node, "CLUSTER", "INFO")),
            timeout,
        )
        total = time.monotonic() - started
    say(f"{replica[0]}:{replica[1]} is the primary; {old[0]}:{old[1]} follows it")
    return Switched(old, replica, total, total)


def switchover(
    settings: RedisSettings, *, replica: str | None, timeout: float, say: Say
) -> Switched:
    """The switch ``settings.url`` calls for (Sentinel or Cluster)."""
    target = parse_sentinel_url(settings.url)
    if target is not None:
        if replica is not None:
            raise SwitchoverError("with Sentinel, Sentinel picks the replica: leave --replica out")
        return sentinel_switchover(target, timeout, say)
    if parse_cluster_url(settings.url) is not None:
        if replica is None:
            raise SwitchoverError("on a cluster, name the replica to promote: --replica HOST:PORT")
        return cluster_switchover(settings, host_and_port(replica, 6379, "--replica"), timeout, say)
    raise SwitchoverError(
        "redis_url names one server: a switchover needs Sentinel (redis+sentinel://) or a "
        "cluster (redis+cluster://)"
    )


__all__ = ["Switched", "SwitchoverError", "switchover"]
