"""arq's Worker, made to wake on enqueue, survive Redis outages and stop cleanly, and
configured for hermes-queue by ``queue_worker()``.

arq polls its queue every ``poll_delay`` (0.5 s by default), so a job waits up to that long
before it starts. Job pickup latency is a product feature here, so ``wake()`` (called when the
enqueue script's pub/sub message arrives, or when a slot frees) makes the loop poll at once; the
timed poll stays as a fallback. An idle worker therefore sends a few commands per second.

``WakeableWorker`` replaces arq's ``main`` and ``close`` and reaches into arq's ``Worker`` state
(``tasks``, ``job_counter``, ``allow_pick_jobs``, ``_pool``...): tests/jobqueue pins each of
those, and the arq versions, so an upgrade that moves them fails a test, not production.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

from arq.connections import RedisSettings, create_pool
from arq.worker import Worker, func
from redis.exceptions import RedisError

from hermes_queue.config import Settings
from hermes_queue.jobqueue.jobs import (
    DELIVERY_LIMIT,
    RUN_TURN,
    deserialize,
    job_timeout_seconds,
    serialize,
)
from hermes_queue.keys import Keys
from hermes_queue.metrics import WorkerMetrics

log = logging.getLogger(__name__)


class WakeableWorker(Worker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wake_event = asyncio.Event()
        # Set once the wake-up channel is subscribed: from then on no enqueue can be missed.
        self.listening = asyncio.Event()
        self._watched: set[str] = set()
        # Set by build_worker; tests reach the worker's metrics through it.
        self.metrics: WorkerMetrics | None = None

    def wake(self) -> None:
        self.wake_event.set()

    @property
    def shutting_down(self) -> bool:
        return not self.allow_pick_jobs

    def start(self) -> asyncio.Task[None]:
        """Run the job loop in a task of its own (the signal handler cancels it)."""
        self.main_task = asyncio.create_task(self.main())
        return self.main_task

    def stop_taking_jobs(self) -> None:
        self.allow_pick_jobs = False

    async def main(self) -> None:  # mirrors arq's Worker.main, with the wait swapped
        if self._pool is None:
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
        backoff = 0.1
        while True:
            self.wake_event.clear()
            before = len(self.tasks)
            try:
                await self._poll_iteration()
                backoff = 0.1
            except (RedisError, OSError) as exc:
                # Redis away: keep the process and its running turns; poll again shortly.
                log.warning("queue poll failed (%s); retrying in %.1fs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
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

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """arq's, minus the ids this worker is already running (a redelivery of a live run)."""
        await super().start_jobs(
            [job_id for job_id in job_ids if job_id.decode() not in self.tasks]
        )

    def handle_sig(self, signum: Any) -> None:
        """Immediate stop (no drain window): mark it, so cancelled turns are handed back."""
        self.stop_taking_jobs()
        super().handle_sig(signum)

    async def close(self) -> None:
        """Stop: running turns are cancelled (and so handed back), then hooks and pool close.

        arq's own close() gathers the job tasks it has just cancelled without
        ``return_exceptions`` when signals are not handled, and so raises CancelledError; and
        it skips the shutdown hook when Redis is away.
        """
        if self._pool is None:
            return
        self.stop_taking_jobs()
        for task in self.tasks.values():
            if not task.done():
                task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        try:
            with contextlib.suppress(RedisError, OSError):
                await self.pool.delete(self.health_check_key)
        finally:
            try:
                if self.on_shutdown:
                    await self.on_shutdown(self.ctx)
            finally:
                with contextlib.suppress(RedisError, OSError):
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


class JobHandler(Protocol):
    """What a worker process does with the queue's deliveries; it never sees arq's ctx."""

    async def start(self, worker: WakeableWorker) -> None:
        """Before the first delivery (the event loop is running)."""

    async def run(self, run_id: str) -> str:
        """One delivery of a run's job; what it returns is only logged."""

    async def delivery_ended(self, run_id: str) -> None:
        """arq has just deleted the job of a delivery that ended (whatever its outcome)."""

    async def stop(self) -> None:
        """After the last delivery ended (also when ``start`` failed part-way)."""


_HANDLER = "hq_handler"  # where the handler sits in arq's ctx


def queue_worker(
    settings: Settings, handler: JobHandler, *, handle_signals: bool = True, burst: bool = False
) -> WakeableWorker:
    """An arq worker on hermes-queue's queue: msgpack jobs, one job function that hands each
    delivery to ``handler``, arq's retries and result keeping off, our turn timeout first."""

    async def run_turn(ctx: dict[str, Any], run_id: str) -> str:
        job_handler: JobHandler = ctx[_HANDLER]
        return await job_handler.run(run_id)

    async def on_startup(ctx: dict[str, Any]) -> None:
        ctx[_HANDLER] = handler
        await handler.start(worker)

    async def on_shutdown(_ctx: dict[str, Any]) -> None:
        await handler.stop()

    async def after_job_end(ctx: dict[str, Any]) -> None:
        await handler.delivery_ended(ctx["job_id"])

    keys = Keys(settings.namespace)
    worker = WakeableWorker(
        functions=[func(run_turn, name=RUN_TURN, max_tries=DELIVERY_LIMIT)],
        queue_name=keys.queue,
        redis_settings=RedisSettings.from_dsn(settings.redis_url),
        burst=burst,
        on_startup=on_startup,
        on_shutdown=on_shutdown,
        after_job_end=after_job_end,
        handle_signals=handle_signals,
        job_completion_wait=int(settings.drain_seconds),
        max_jobs=settings.worker_concurrency,
        # Our own turn timeout fails the run cleanly; arq's is only a backstop behind it.
        job_timeout=job_timeout_seconds(settings.job_timeout_seconds),
        keep_result=0,
        poll_delay=settings.poll_seconds,
        max_tries=DELIVERY_LIMIT,
        health_check_key=keys.health_check,
        job_serializer=serialize,
        job_deserializer=deserialize,
        log_results=False,
    )
    return worker
