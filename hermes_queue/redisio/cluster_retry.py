"""redis-py's cluster client, sending again only what is safe to send again, for up to
``redis_switchover_wait_seconds`` (``redisio/switchover.py`` says which failures are which).

redis-py's asyncio ``RedisCluster`` resends a command, and a ``ClusterPipeline`` a whole
pipeline, after any connection error or timeout, including one after which the node may have
run it (a run script would then run twice), and only three times in a row, with no pause, so
a switchover of a second or more outlasts them. Here:

* a command or pipeline that failed **without effect** (:class:`~.switchover.NotApplied`: no
  connection; ``CLUSTERDOWN``; a slot not covered yet) is sent again, with a pause, until the
  wait is over;
* one that failed **ambiguously** (the connection cut after it was sent; Redis 7.0 closes the
  connections of the clients it paused for a ``CLUSTER FAILOVER``) is sent again only when it
  changes nothing (``switchover.resendable``: reads, ``SCRIPT LOAD``); any other propagates at
  once. The writes that are safe to send again are so by their scripts, which recognise their
  own earlier send (``redisio/replication.py``, ``runs/lua/create.lua``).

Redirections (``MOVED``, ``ASK``, ``TRYAGAIN``) are answers of a node that did not apply the
command, which redis-py follows as before, 16 in a row at most (~0.4 s): then it gives up with
``ClusterError("TTL exhausted.")``, nothing applied (a migration splitting a script's keys
answers ``TRYAGAIN`` until its last key moved), and the call is sent again within the wait.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.cluster import (
    ClusterNode,
    ClusterPipeline,
    NodesManager,
    PipelineCommand,
    RedisCluster,
)
from redis.exceptions import (
    ClusterDownError,
    ClusterError,
    RedisClusterException,
    SlotNotCoveredError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.redisio.cluster_seeds import keep_seeds, restore_seeds
from hermes_queue.redisio.switchover import (
    Deadline,
    NotApplied,
    SwitchoverConnection,
    resendable,
)

# Failures of a call that was not applied: redis-py may send it again at once.
NOT_APPLIED = (NotApplied, ClusterDownError, SlotNotCoveredError)
# Every failure after which a call may be sent again, when it is safe to (see above).
_FAILED = (RedisConnectionError, RedisTimeoutError, ClusterDownError, SlotNotCoveredError)


class SafeRetryCluster(RedisCluster):
    """redis-py's cluster client whose retries follow the module docstring's rule.
    ``switchover_wait``: how long a failed call is sent again (0: redis-py's three immediate
    retries of what was not applied, no more)."""

    ERRORS_ALLOW_RETRY = NOT_APPLIED  # type: ignore[assignment]

    def __init__(self, *args: Any, switchover_wait: float = 0.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.switchover_wait = switchover_wait
        # redis-py takes no connection class for a cluster: set it where its nodes are built
        # (the nodes manager shares this dict) and on the seeds already built.
        self.connection_kwargs["connection_class"] = SwitchoverConnection
        for node in self.nodes_manager.startup_nodes.values():
            node.connection_class = SwitchoverConnection
        self.nodes_manager.__class__ = _RetriedRebuilds
        keep_seeds(self.nodes_manager)

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        waited = Deadline(self.switchover_wait)
        while True:
            try:
                return await super().execute_command(*args, **kwargs)
            except _FAILED as exc:
                if not (isinstance(exc, NOT_APPLIED) or resendable(args)):
                    raise
                if not await waited.pause():
                    raise
            except ClusterError as exc:
                if not _redirected_too_often(exc) or not await waited.pause():
                    raise

    def pipeline(
        self, transaction: Any | None = None, shard_hint: Any | None = None
    ) -> ClusterPipeline:
        super().pipeline(transaction, shard_hint)  # refuses what a cluster pipeline cannot do
        return SafePipeline(self)  # type: ignore[abstract]


class SafePipeline(ClusterPipeline):
    """A cluster pipeline sent again as a whole only when every command in it changes nothing
    (hermes-queue's cluster pipelines are reads: queue depths, records, stream pages); one
    holding a write is retried by redis-py only after failures known not applied."""

    ERRORS_ALLOW_RETRY = NOT_APPLIED  # type: ignore[assignment]

    async def execute(
        self, raise_on_error: bool = True, allow_redirections: bool = True
    ) -> list[Any]:
        queued = [(cmd.args, dict(cmd.kwargs)) for cmd in self._command_stack]
        reads = all(resendable(args) for args, _ in queued)
        client = self._client
        assert isinstance(client, SafeRetryCluster)
        waited = Deadline(client.switchover_wait)
        while True:
            # redis-py clears the stack after each execution and consumes its options.
            self._command_stack = [
                PipelineCommand(i, *args, **dict(kwargs)) for i, (args, kwargs) in enumerate(queued)
            ]
            try:
                return await super().execute(raise_on_error, allow_redirections)
            except _FAILED:
                if not reads or not await waited.pause():
                    raise


def _redirected_too_often(error: BaseException) -> bool:
    """Whether ``error`` is redis-py's cluster client giving up after following redirections
    and ``TRYAGAIN`` replies only (``RedisCluster._execute_command``): nothing was applied."""
    return isinstance(error, ClusterError) and str(error) == "TTL exhausted."


_REBUILD_TRIES = 3


class _RetriedRebuilds(NodesManager):
    """redis-py's nodes manager, rebuilding its slot table during a failover, iterates its
    startup nodes across awaits while another rebuild, or a failed command dropping its node
    from them, changes that dict: ``RuntimeError: dictionary changed size during iteration``
    reached callers as a 500. A rebuild cut short that way is tried again; the last such
    failure is a connection error (nothing was sent). Each rebuild first puts back the seeds
    redis-py dropped (``redisio/cluster_seeds.py``). Set as the class of the client's own
    manager (redis-py takes no manager class; its slots leave no room for a wrapper)."""

    __slots__ = ()

    async def initialize(self) -> None:
        for attempt in range(_REBUILD_TRIES):
            restore_seeds(self, self._seed_node)
            try:
                await super().initialize()
                return
            except RuntimeError as exc:
                if attempt == _REBUILD_TRIES - 1:
                    raise NotApplied(f"slot table not rebuilt: {exc}") from exc
            except RedisClusterException as exc:
                if isinstance(exc.__cause__, (*_FAILED, OSError)):  # no node answered
                    raise NotApplied(f"slot table not rebuilt: {exc}") from exc
                raise

    def _seed_node(self, host: str, port: int) -> ClusterNode:
        return ClusterNode(host, port, **self.connection_kwargs)


__all__ = ["NOT_APPLIED", "SafePipeline", "SafeRetryCluster"]
