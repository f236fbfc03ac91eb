"""Everything one API process holds, in one typed object under one app key.

``create_app`` opens an :class:`ApiState` when the app starts and closes it when the app stops;
nothing else is kept in the app. A handler takes from it the services it needs and hands each
helper only the one that helper uses, so no helper digs its dependencies out of the request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import redis.asyncio as aioredis
from aiohttp import web

from hermes_queue.api.drain import Drain
from hermes_queue.api.feed import RunFeed
from hermes_queue.api.turns.backpressure import Backpressure
from hermes_queue.api.turns.idempotency import IdempotencyRecords
from hermes_queue.api.turns.starter import TurnStarter
from hermes_queue.catalog import CachedCatalog
from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.metrics.processes import ApiMetrics
from hermes_queue.redisio.connect import connect
from hermes_queue.routing import RoutingConfig
from hermes_queue.routing.configured import routing_config
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.start import RunStarter
from hermes_queue.schedules.firing import Firing, job_timezone
from hermes_queue.store import open_store
from hermes_queue.store.protocol import SessionStore
from hermes_queue.streams.hub import StreamHub
from hermes_queue.tenancy.keys import KeyTable
from hermes_queue.webhooks.outbox import Outbox

if TYPE_CHECKING:
    from hermes_queue.tracing.spans import Tracing

T = TypeVar("T")


@dataclass
class BackgroundTasks:
    """Work a request starts that outlives its connection (a stored response being settled
    whether or not its client stays), ended with the process."""

    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    def start(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def aclose(self) -> None:
        """Cancel what still runs. Bounded: a subscription may be mid-read when cancelled; once
        the hub closes right after this, every subscription ends anyway (a response left
        unsettled is settled by its next read, on any replica)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)


@dataclass(frozen=True)
class ApiState:
    """The process's configuration, backends and the services built on them."""

    settings: Settings
    keys: Keys
    redis: aioredis.Redis
    # Run records and their transitions (create, stop, approvals).
    runs: RunRepository
    # The process's one reader of run event streams, shared by every SSE client.
    hub: StreamHub
    # The SQL session store (sessions, transcripts, stored responses).
    store: SessionStore
    metrics: ApiMetrics
    routing: RoutingConfig
    # Admission under load: 429 before anything is written (turns, job run-now).
    backpressure: Backpressure
    # Starting a turn: backpressure, the session rules, the run and its job (api/turns/starter.py).
    turns: TurnStarter
    # Following a run: its events as SSE, its final reply (api/feed.py).
    feed: RunFeed
    idempotency: IdempotencyRecords
    catalog: CachedCatalog
    # Scheduled jobs' fires and their records (run-now, settling what a read shows).
    firing: Firing
    # The process's shutdown: readiness, requests in flight, streams cut at the bound.
    drain: Drain
    background: BackgroundTasks
    # Webhook deliveries as the operator's views read them (webhooks/outbox.py).
    webhooks: Outbox
    # The deployment's keys as digests, by tenant (tenancy/keys.py): who a bearer is.
    key_table: KeyTable = field(default_factory=KeyTable)

    @classmethod
    async def open(cls, settings: Settings, tracing: Tracing | None = None) -> ApiState:
        redis = connect(settings.redis)
        keys = settings.redis.keys
        hub = StreamHub(redis, keys, queue_size=settings.streams.subscriber_queue_size)
        await hub.start()
        try:
            store = await open_store(settings.store, redis_url=settings.redis.url)
        except BaseException:  # the app does not start: close what was opened
            await hub.aclose()
            await redis.aclose()
            raise
        key_table = KeyTable(settings.api.tenant_keys())
        metrics = ApiMetrics(key_table.tenants)
        # Runs this process ends (stop of a queued run, reaper) count in its runs_total.
        runs = RunRepository(
            redis,
            keys,
            settings.runs,
            on_finished=metrics.count_outcome,
            subscribed=bool(settings.webhooks.subscriptions),
        )
        routing = routing_config(settings.routing)
        api = settings.api
        backpressure = Backpressure(
            redis,
            keys,
            metrics,
            max_depth=api.max_ready_depth,
            max_age=api.max_ready_age_seconds,
            limits=settings.runs.limits,
            tenants=key_table.tenants,
        )
        drain = Drain(on_cut=metrics.drain_cut)
        feed = RunFeed(hub, redis, keys, api.keepalive_seconds, drain, tracing)
        # Run-now fires are read by nobody's request: started without this process's presence.
        firing = Firing(
            store,
            RunStarter(runs),
            routing,
            job_timezone(settings.schedules),
            metrics,
        )
        return cls(
            settings=settings,
            keys=keys,
            redis=redis,
            runs=runs,
            hub=hub,
            store=store,
            metrics=metrics,
            routing=routing,
            backpressure=backpressure,
            turns=TurnStarter(
                RunStarter(runs, hub.presence),
                store,
                backpressure,
                routing.model_name,
                tracing,
                tenanted=len(key_table.tenants) > 1,
            ),
            feed=feed,
            idempotency=IdempotencyRecords(
                redis,
                keys,
                api_key=api.api_key,
                ttl_seconds=api.idempotency_ttl_seconds,
                retention=settings.runs.retention_seconds,
            ),
            catalog=CachedCatalog(redis, keys),
            firing=firing,
            drain=drain,
            background=BackgroundTasks(),
            webhooks=Outbox(redis, keys),
            key_table=key_table,
        )

    async def aclose(self) -> None:
        """Stop what runs in the background, then close the backends."""
        await self.background.aclose()
        await self.hub.aclose()
        await self.store.close()
        await self.redis.aclose()


STATE = web.AppKey("state", ApiState)
