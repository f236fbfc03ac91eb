"""The worker process: an arq Worker that wakes on enqueue, plus lease keeper, control and reaper.

arq polls its queue every ``poll_delay`` (0.5 s by default), so a job waits up to that long
before it starts. Job pickup latency is a product feature here, so the worker also listens on a
pub/sub channel that the enqueue script publishes to, and polls at once when told; the timed
poll stays as a fallback (and for a freed slot, which wakes it too). An idle worker therefore
sends a couple of commands per second, not a busy loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from typing import Any

import redis.asyncio as aioredis
from arq.connections import RedisSettings
from arq.worker import Worker, func

from hermes_queue.agents import load_backend
from hermes_queue.config import Settings
from hermes_queue.jobs import RUN_TURN, deserialize, serialize
from hermes_queue.keys import Keys
from hermes_queue.runs.repository import RunRepository
from hermes_queue.store import open_store
from hermes_queue.workers.lease_keeper import STOP_REQUESTED, LeaseKeeper
from hermes_queue.workers.reaper import reap_forever
from hermes_queue.workers.turn import WorkerRuntime, run_turn

log = logging.getLogger(__name__)


class WakeableWorker(Worker):
    """arq's Worker with its fixed-interval poll replaced by "poll on wake-up or timeout"."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wake_event = asyncio.Event()
        # Set once the wake-up channel is subscribed: from then on no enqueue can be missed.
        self.listening = asyncio.Event()
        self._watched: set[str] = set()

    def wake(self) -> None:
        self.wake_event.set()

    async def main(self) -> None:  # mirrors arq's Worker.main, with the wait swapped
        if self._pool is None:
            from arq.connections import create_pool

            self._pool = await create_pool(
                self.redis_settings,
                job_deserializer=self.job_deserializer,
                job_serializer=self.job_serializer,
                default_queue_name=self.queue_name,
                expires_extra_ms=self.expires_extra_ms,
            )
        self.ctx["redis"] = self.pool
        if self.on_startup:
            await self.on_startup(self.ctx)
        while True:
            self.wake_event.clear()
            before = len(self.tasks)
            await self._poll_iteration()
            self._watch_new_tasks()
            if self.burst and await self._burst_done():
                return
            if len(self.tasks) > before and self.job_counter < self.max_jobs:
                continue  # took jobs and has room: look again before sleeping
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # lands as the event fires, and the worker would then never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_delay_s):
                    await self.wake_event.wait()

    async def close(self) -> None:
        """Stop: running turns are cancelled (and so handed back), then hooks and pool close.

        arq's own close() gathers the job tasks it has just cancelled without
        ``return_exceptions`` when signals are not handled, and so raises CancelledError.
        """
        if self._pool is None:
            return
        for task in self.tasks.values():
            if not task.done():
                task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        await self.pool.delete(self.health_check_key)
        if self.on_shutdown:
            await self.on_shutdown(self.ctx)
        await self.pool.aclose()
        self._pool = None

    def _watch_new_tasks(self) -> None:
        """A finished job frees a slot: wake the loop so a waiting job starts at once."""
        self._watched &= set(self.tasks)
        for job_id, task in self.tasks.items():
            if job_id not in self._watched:
                self._watched.add(job_id)
                task.add_done_callback(lambda _t: self.wake_event.set())

    async def _burst_done(self) -> bool:
        if 0 <= self.max_burst_jobs <= self._jobs_started():
            await asyncio.gather(*self.tasks.values())
            return True
        if await self.pool.zcard(self.queue_name) == 0:
            await asyncio.gather(*self.tasks.values())
            return True
        return False


async def _listen(
    redis: aioredis.Redis, keys: Keys, worker: WakeableWorker, rt: WorkerRuntime
) -> None:
    """Wake-ups and stop requests over pub/sub; reconnects on its own after a Redis outage."""
    delay = 0.1
    while True:
        pubsub = redis.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(keys.wake_channel, keys.control_channel)
            delay = 0.1
            worker.listening.set()
            worker.wake()  # anything enqueued while we were away
            async for message in pubsub.listen():
                channel = message["channel"].decode()
                if channel == keys.wake_channel:
                    worker.wake()
                else:
                    rt.signal(message["data"].decode(), STOP_REQUESTED)
        except (OSError, aioredis.RedisError) as exc:
            log.warning("control channel lost (%s); reconnecting in %.1fs", exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def build_worker(
    settings: Settings, *, handle_signals: bool = True, burst: bool = False
) -> WakeableWorker:
    """An arq worker wired to hermes-queue: msgpack jobs, our run job, our lifecycle hooks."""
    keys = Keys(settings.namespace)
    worker_id = new_worker_id()
    background: list[asyncio.Task[None]] = []

    async def on_startup(ctx: dict[str, Any]) -> None:
        redis = aioredis.Redis.from_url(settings.redis_url)
        repository = RunRepository(redis, settings)
        backend = load_backend(settings.agent_backend, token_delay=settings.echo_token_delay)
        runtime = WorkerRuntime(
            worker_id=worker_id,
            repository=repository,
            backend=backend,
            store=await open_store(settings),
        )
        loop = asyncio.get_running_loop()
        runtime.keeper = LeaseKeeper(
            settings, repository, worker_id, loop, runtime.signal, settings.worker_concurrency
        )
        runtime.keeper.start()
        ctx["hq"] = runtime
        ctx["hq_redis"] = redis
        background.append(asyncio.create_task(_listen(redis, keys, worker, runtime)))
        background.append(
            asyncio.create_task(reap_forever(repository, settings.reaper_interval_seconds))
        )
        log.info(
            "worker %s ready (%d slots, backend %s)",
            worker_id,
            settings.worker_concurrency,
            backend.name,
        )

    async def on_shutdown(ctx: dict[str, Any]) -> None:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        runtime: WorkerRuntime | None = ctx.get("hq")
        if runtime is not None:
            if runtime.keeper is not None:
                await asyncio.to_thread(runtime.keeper.stop)
            await runtime.backend.aclose()
            if runtime.store is not None:
                await runtime.store.close()
        if "hq_redis" in ctx:
            await ctx["hq_redis"].aclose()

    worker = WakeableWorker(
        functions=[func(run_turn, name=RUN_TURN, max_tries=1000)],
        queue_name=keys.queue,
        redis_settings=RedisSettings.from_dsn(settings.redis_url),
        burst=burst,
        on_startup=on_startup,
        on_shutdown=on_shutdown,
        handle_signals=handle_signals,
        job_completion_wait=int(settings.drain_seconds),
        max_jobs=settings.worker_concurrency,
        job_timeout=settings.job_timeout_seconds,
        keep_result=0,
        poll_delay=settings.poll_seconds,
        max_tries=1000,
        health_check_key=keys.health_check,
        job_serializer=serialize,
        job_deserializer=deserialize,
        log_results=False,
    )
    return worker
