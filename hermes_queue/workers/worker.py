"""The worker process: the queue's worker (``jobqueue``) handing each run to ``run_turn``,
with its side tasks. It warms its backend up (``warmup.py``) before it takes its first run.

Beside the job loop a worker runs: a pub/sub listener (enqueue wake-ups, stop requests and
approval answers), the lease keeper thread, a reaper, the publisher of its backend's catalog
(skills and toolsets, if the backend has them), the job scheduler
(``schedules/scheduler.py``) and the webhook sender (``webhooks/sender.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from typing import TYPE_CHECKING, Any, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from hermes_queue.agents import load_backend
from hermes_queue.aio import cancel_and_wait, cancel_requested
from hermes_queue.catalog import publish_forever
from hermes_queue.config import Settings
from hermes_queue.jobqueue.worker import WakeableWorker, queue_worker
from hermes_queue.keys import Keys
from hermes_queue.metrics.processes import WorkerMetrics
from hermes_queue.providers import resolve_api_key
from hermes_queue.redisio.cluster import trim_forever
from hermes_queue.redisio.connect import connect
from hermes_queue.redisio.health import OutageLog
from hermes_queue.routing.configured import routing_config
from hermes_queue.runs.approvals import APPROVAL_MESSAGE_PREFIX
from hermes_queue.runs.reaper import reap_forever
from hermes_queue.runs.repository import RunRepository
from hermes_queue.schedules.scheduler import start_scheduler
from hermes_queue.store import open_store
from hermes_queue.webhooks.sender import WebhookSender
from hermes_queue.workers.lease_keeper import STOP_REQUESTED, LeaseKeeper
from hermes_queue.workers.shard_listener import listen_shards
from hermes_queue.workers.turn import WorkerRuntime, run_turn
from hermes_queue.workers.warmup import WarmUpState, warm_up

if TYPE_CHECKING:
    from hermes_queue.tracing.spans import Tracing

log = logging.getLogger(__name__)


def _on_control(rt: WorkerRuntime, data: str) -> None:
    """On the control channel an answer is ``approval:<run_id>``, a stop request the bare run
    id."""
    if data.startswith(APPROVAL_MESSAGE_PREFIX):
        rt.approval_answered(data.removeprefix(APPROVAL_MESSAGE_PREFIX))
    else:
        rt.signal(data, STOP_REQUESTED)


async def _listen_cluster(
    redis: aioredis.Redis, keys: Keys, worker: WakeableWorker, rt: WorkerRuntime
) -> None:
    """On a Redis Cluster: every shard's channels (``shard_listener.py``)."""
    pending = set(keys.shard_ids)

    def subscribed(shard: int) -> None:
        pending.discard(shard)
        if not pending:
            worker.listening.set()
        worker.wake(shard)  # anything enqueued while that shard was not heard

    def heard(kind: str, shard: int, data: str) -> None:
        if kind == "wake":
            worker.wake(shard)  # its next poll reads that shard's queue
        else:
            _on_control(rt, data)

    await listen_shards(cast("RedisCluster", redis), keys, heard, subscribed)


async def _listen(
    redis: aioredis.Redis, keys: Keys, worker: WakeableWorker, rt: WorkerRuntime
) -> None:
    """Wake-ups, stop requests and approval answers over pub/sub; reconnects on its own after
    a Redis outage."""
    if keys.cluster:
        await _listen_cluster(redis, keys, worker, rt)
        return
    delay = 0.1
    outage = OutageLog(log, "control channel")
    while not cancel_requested():
        pubsub = redis.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(keys.wake_channel, keys.control_channel)
            delay = 0.1
            outage.ok()
            worker.listening.set()
            worker.wake()  # anything enqueued while we were away
            async for message in pubsub.listen():
                channel = message["channel"].decode()
                if channel == keys.wake_channel:
                    worker.wake()
                    continue
                _on_control(rt, message["data"].decode())
        except (OSError, aioredis.RedisError) as exc:
            outage.failed(exc)  # once per outage: a reconnect is tried every few seconds
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]


def backend_options(settings: Settings) -> dict[str, Any]:
    """What the configured agent backend is built from. Provider keys are not among them: the
    backend asks ``resolve_api_key`` for the one provider a turn runs on, when it runs."""
    providers = {
        name: {
            "base_url": provider.base_url,
            "api_mode": provider.api_mode,
            "timeout": provider.timeout_seconds,
            "max_retries": provider.max_retries,
        }
        for name, provider in settings.routing.providers.items()
    }

    def credentials(name: str) -> str:
        return resolve_api_key(settings.routing.providers[name])

    return {
        "token_delay": settings.agents.echo_token_delay,
        "tool_log": settings.agents.echo_tool_log,
        "providers": providers,
        "default_provider": settings.routing.default_provider or next(iter(providers), ""),
        "credentials": credentials,
        "default_model": settings.routing.default_model,
        "hermes_home": settings.agents.hermes_home,
        "toolsets": settings.agents.hermes_toolsets,
        "max_iterations": settings.agents.hermes_max_iterations,
        "agent_cache_size": settings.agents.hermes_agent_cache_size,
        "max_turns": settings.worker.concurrency,
    }


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class WorkerProcess:
    """One worker process's side of the queue: what each delivered job runs, and what runs
    beside the jobs (listener, lease keeper, reaper, catalog publisher)."""

    def __init__(
        self,
        settings: Settings,
        worker_id: str,
        metrics: WorkerMetrics,
        tracing: Tracing | None = None,
    ) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self.metrics = metrics
        # This process's tracing (hermes_queue/tracing/), when the CLI installed it.
        self.tracing = tracing
        self.runtime: WorkerRuntime | None = None
        self._clients: list[aioredis.Redis] = []
        self._background: list[asyncio.Task[None]] = []
        self._sender: WebhookSender | None = None
        self.warm_up_state = WarmUpState(settings.redis.namespace)
        self._metrics_served = False
        self.metrics_port: int | None = None

    def serve_metrics(self) -> int | None:
        """Serve ``/metrics`` (once): before Redis answers too, since it is the worker's
        liveness probe and a worker waiting for Redis is alive."""
        if not self._metrics_served:
            self._metrics_served = True
            metrics = self.settings.metrics
            self.metrics_port = self.metrics.serve(metrics.host, metrics.port, metrics.port_span)
        return self.metrics_port

    def _connect(self, worker: WakeableWorker) -> tuple[aioredis.Redis, aioredis.Redis]:
        """The process's client and its wake-up listener's."""
        if self.settings.redis.cluster:
            # The queue loop's cluster client (jobqueue/worker.py) serves the process too, so a
            # worker holds one pool per node, not two; the loop closes it. The listener is per
            # node, on connections of its own (shard_listener.py).
            self._clients = []
            shared = cast("aioredis.Redis", worker.pool)
            return shared, shared
        redis = connect(self.settings.redis)
        listener = connect(self.settings.redis, for_pubsub=True)
        self._clients = [redis, listener]
        return redis, listener

    def _start_sender(self, redis: aioredis.Redis) -> None:
        """This worker's webhook sender, a background task beside the others."""
        settings = self.settings
        sender = WebhookSender(
            redis,
            settings.redis.keys,
            settings.webhooks,
            retention_seconds=settings.runs.retention_seconds,
            observer=self.metrics,
            trace=self.tracing,
        )
        self._sender = sender
        self._background.append(asyncio.create_task(sender.run_forever()))
        if self.runtime is not None:  # a run of ours that queued deliveries: send them now
            keys = settings.redis.keys
            self.runtime.deliveries_queued = lambda run_id: sender.wake(keys.shard_of(run_id))

    async def start(self, worker: WakeableWorker) -> None:
        settings, metrics = self.settings, self.metrics
        redis, listener = self._connect(worker)
        keys = settings.redis.keys
        repository = RunRepository(
            redis,
            keys,
            settings.runs,
            on_finished=metrics.count_outcome,
            finish_trace=self.tracing,
            subscribed=bool(settings.webhooks.subscriptions),
        )
        backend = load_backend(settings.agents.backend, **backend_options(settings))
        # Before anything that takes or announces work: the first turn must not pay set-up.
        await warm_up(backend, self.warm_up_state)
        runtime = WorkerRuntime(
            worker_id=self.worker_id,
            repository=repository,
            backend=backend,
            store=await open_store(settings.store, redis_url=settings.redis.url),
            turn_timeout=float(settings.worker.job_timeout_seconds),
            shutting_down=lambda: worker.shutting_down,
            metrics=metrics,
            tracing=self.tracing,
            # Hermes' own default home when none is set: its secrets are refused there too.
            hermes_home=settings.agents.hermes_home or os.environ.get("HERMES_HOME") or "~/.hermes",
        )
        self.runtime = runtime
        metrics.active_runs.set_function(lambda: len(runtime.active))
        metrics_port = self.serve_metrics()
        runtime.keeper = LeaseKeeper(
            settings.redis,
            repository.leases,
            self.worker_id,
            asyncio.get_running_loop(),
            runtime.signal,
            settings.worker.concurrency,
            presence=redis,
            metrics_port=metrics_port,
        )
        runtime.keeper.start()
        self._background = [
            asyncio.create_task(_listen(listener, keys, worker, runtime)),
            asyncio.create_task(
                reap_forever(repository, settings.runs.reaper_interval_seconds, self.worker_id)
            ),
            asyncio.create_task(publish_forever(redis, keys, backend)),
            *start_scheduler(
                settings.schedules,
                runtime.store,
                repository,
                routing_config(settings.routing),
                metrics,
            ),
        ]
        if settings.redis.cluster:  # an idle worker: one pool connection per node

            def idle() -> bool:  # no run in hand
                return worker.job_counter == 0

            cluster = cast("RedisCluster", redis)
            self._background.append(asyncio.create_task(trim_forever(cluster, idle=idle)))
        if settings.webhooks.poll_seconds > 0:  # 0: this worker sends no webhooks
            self._start_sender(redis)
        log.info(
            "worker %s ready (%d slots, backend %s)",
            self.worker_id,
            settings.worker.concurrency,
            backend.name,
        )

    async def run(self, run_id: str) -> str:
        assert self.runtime is not None, "a job before the worker started"
        return await run_turn(self.runtime, run_id)

    async def stop(self) -> None:
        """Stop the side tasks, the lease keeper, the backend, the store and the clients."""
        self.warm_up_state.clear()
        await asyncio.to_thread(self.metrics.close)
        await cancel_and_wait(*self._background)
        runtime = self.runtime
        if runtime is not None:
            if runtime.keeper is not None:
                await runtime.keeper.aclose()
            await runtime.backend.aclose()
            await runtime.repository.aclose()
            if runtime.store is not None:
                await runtime.store.close()
        for client in self._clients:
            await client.aclose()


def build_worker(
    settings: Settings,
    *,
    handle_signals: bool = True,
    burst: bool = False,
    tracing: Tracing | None = None,
) -> WakeableWorker:
    """The queue's worker, handing every delivery to this process's ``WorkerProcess``."""
    metrics = WorkerMetrics()
    process = WorkerProcess(settings, new_worker_id(), metrics, tracing)
    worker = queue_worker(
        settings.redis, settings.worker, process, handle_signals=handle_signals, burst=burst
    )
    worker.metrics = metrics
    wait_for_redis = worker.wait_for_redis

    async def serve_metrics_then_wait() -> None:
        process.serve_metrics()
        if wait_for_redis is not None:
            await wait_for_redis()

    worker.wait_for_redis = serve_metrics_then_wait
    return worker
