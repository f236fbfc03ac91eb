"""The queue's worker loop: arq's ``Worker`` as the process shell (signals, drain, health line,
burst mode), with its per-job protocol replaced by ours, and ``queue_worker()``, which
configures it for hermes-queue.

arq picks a job up in three round trips of its own before the job runs (``WATCH``/``EXISTS``/
``ZSCORE`` then ``MULTI``/``PSETEX`` in-progress/``EXEC``; ``MULTI``/``GET`` job/``INCR`` +
``EXPIRE`` retry counter/``EXEC``) and one after it (``MULTI``/``DEL`` job, in-progress, retry/
``ZREM`` abort set/``ZREM`` queue/``EXEC``), and it needs a job key per run. None of that is
needed here: the claim script is exclusive on its own (its ``ZREM`` of the queue entry is the
pickup), a run's attempts are bounded by the run record, stops go through the run record too,
and nothing reads a job's result. So a poll reads the head of the queue (one ``ZRANGE``) and
starts a delivery per id, which is the handler's claim and turn; nothing else is written.

arq polls every ``poll_delay`` (0.5 s by default), so a job could wait that long. Pickup
latency is a product feature here, so ``wake()`` (called when the enqueue script's pub/sub
message arrives, or when a slot frees) makes the loop poll at once; the timed poll stays as a
fallback, one ``ZRANGE`` per ``poll_delay`` on an idle worker. On a Redis Cluster the queue is
one sorted set per shard: a wake-up names its shard and the next poll reads that shard's head
(the shards woken together in one pipelined call, a round trip per node); the timed poll reads
the shards in turn, a sixteenth of them each time (``_timed_poll``), so an idle worker's poll
costs about what it costs on one Redis whatever the number of shards.

``WakeableWorker`` replaces arq's ``main``, ``_poll_iteration`` and ``close`` and reaches into
arq's ``Worker`` state (``tasks``, ``job_counter``, ``allow_pick_jobs``, ``_pool``...):
tests/jobqueue pins each of those, and the arq versions, so an upgrade that moves them fails a
test, not production.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

from arq.connections import ArqRedis, create_pool
from arq.connections import RedisSettings as ArqRedisSettings
from arq.worker import Worker, func
from redis.exceptions import RedisError

from hermes_queue.config import RedisSettings, WorkerSettings
from hermes_queue.jobqueue.connection import redis_settings
from hermes_queue.jobqueue.jobs import RUN_TURN, deserialize, job_timeout_seconds, serialize
from hermes_queue.metrics.processes import WorkerMetrics
from hermes_queue.redisio.connect import connect, wait_until_answering
from hermes_queue.redisio.health import OutageLog

log = logging.getLogger(__name__)

# On a Redis Cluster the timed poll reads 1/SWEEP_POLLS of the shards in turn (``_timed_poll``).
SWEEP_POLLS = 16


class WakeableWorker(Worker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wake_event = asyncio.Event()
        # Set once the wake-up channel is subscribed: from then on no enqueue can be missed.
        self.listening = asyncio.Event()
        self._watched: set[str] = set()
        # Whether the last poll may have left queued runs behind (_poll_iteration).
        self.queue_may_hold_more = False
        # What each delivery is handed to (set by queue_worker).
        self.handler: JobHandler | None = None
        # Set by build_worker; tests reach the worker's metrics through it.
        self.metrics: WorkerMetrics | None = None
        # Every shard's turn order (keys.py: turn_order_at), polled together, and beside each
        # its fair-turn state (fair_at: the turn in service, v); one of each without a cluster.
        self.queue_names: list[str] = [self.queue_name]
        self.fair_names: list[str] = []
        # The shards the next poll reads: those woken since the last one; None: every shard
        # (the timed poll, a freed slot, a listener that reconnected, or a wake naming none).
        self._poll_due: set[int] | None = None
        self._sweep_next = 0  # the shard the next timed poll reads first (_timed_poll)
        # Awaited before the first connection: returns once Redis answers (set by
        # queue_worker), so a worker started before Redis waits for it instead of exiting.
        self.wait_for_redis: Callable[[], Awaitable[None]] | None = None
        self._outage = OutageLog(log, "queue poll")

    def wake(self, shard: int | None = None) -> None:
        """Poll at once: ``shard``'s queue (a wake-up of that shard), or (None) every one."""
        if shard is None:
            self._poll_due = None
        elif self._poll_due is not None:
            self._poll_due.add(shard)
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

    async def _open_pool(self) -> None:
        """arq's pool, once Redis answers (``wait_for_redis``). arq's own retries (five, then
        it raises) are skipped: if Redis went away again since, this waits again."""
        settings = self.redis_settings or ArqRedisSettings()
        while self._pool is None:
            if self.wait_for_redis is not None:
                await self.wait_for_redis()
            try:
                self._pool = await create_pool(
                    settings,
                    retry=settings.conn_retries,  # none left: fail at once
                    job_deserializer=self.job_deserializer,
                    job_serializer=self.job_serializer,
                    default_queue_name=self.queue_name,
                    expires_extra_ms=self.expires_extra_ms,
                )
            except (RedisError, OSError) as exc:
                if self.wait_for_redis is None:
                    raise
                log.debug("queue pool not opened (%r); waiting for Redis again", exc)

    async def main(self) -> None:  # mirrors arq's Worker.main, with the wait swapped
        if self.wait_for_redis is not None and self._pool is not None:
            await self.wait_for_redis()  # a pool handed in (cluster) connects lazily
        await self._open_pool()
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
                self._outage.ok()
            except (RedisError, OSError) as exc:
                # Redis away: keep the process and its running turns; poll again shortly (and
                # say so once, not once per poll).
                self._outage.failed(exc)
                self._poll_due = None  # read every shard again: the woken ones were not
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            self._watch_new_tasks()
            if self.burst and await self._burst_done():
                return
            if (
                len(self.tasks) > before
                and self.queue_may_hold_more
                and self.job_counter < self.max_jobs
            ):
                continue  # left some behind and has room: look again before sleeping
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # lands as the event fires, and the worker would then never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_delay_s):
                    await self.wake_event.wait()
            if not self.wake_event.is_set():
                self._timed_poll()

    def _timed_poll(self) -> None:
        """What a poll nobody woke reads: the queue, without a cluster; on a cluster the next
        :data:`SWEEP_POLLS`-th of the shards in turn, so each shard is read every
        ``SWEEP_POLLS × poll_delay`` (8 s by default) rather than every ``poll_delay``. The
        shards' wake-ups are what a cluster worker runs on: a wake-up is lost only while a
        node's listener is not subscribed, and every shard it subscribes again is read at once
        (``workers/shard_listener.py``); the sweep is the backstop behind that."""
        shards = len(self.queue_names)
        if shards == 1:
            self._poll_due = None
            return
        if self._poll_due is None:
            return
        per_poll = -(-shards // SWEEP_POLLS)
        for _ in range(per_poll):
            self._poll_due.add(self._sweep_next)
            self._sweep_next = (self._sweep_next + 1) % shards

    async def _poll_iteration(self) -> None:
        """Start a delivery for each queued run id at the head of the queue, up to the free
        slots (ids this worker is already delivering are left alone); forget finished ones."""
        free = self.max_jobs - self.job_counter
        # A page with no id beyond the free slots means the queue held no more than this
        # worker took: a run queued after this read wakes the loop (wake_event was cleared
        # before it). So only when a page had more (``_queue_heads``), or with no slot free to
        # read one, do more polls (the next one, or the one a finished run's freed slot
        # triggers) have anything to find.
        self.queue_may_hold_more = free <= 0
        if self.allow_pick_jobs and free > 0:
            ids = await self._queue_heads(free)
            for raw in ids:
                run_id = raw.decode()
                if run_id in self.tasks or self.job_counter >= self.max_jobs:
                    continue
                self.job_counter += 1
                task = asyncio.create_task(self._deliver(run_id))
                task.add_done_callback(self._slot_freed)
                self.tasks[run_id] = task
        for run_id, task in list(self.tasks.items()):
            if task.done():
                del self.tasks[run_id]
        await self.heart_beat()

    async def _queue_heads(self, free: int) -> list[bytes]:
        """Up to ``free`` queued run ids, next turn first. On a cluster the turn-order heads of
        the shards due (woken since the last poll; every shard on the timed poll or after a
        poll that left some behind) are read in one pipelined call (a round trip per node, in
        parallel), each with its shard's turn in service, and the ids of them all nearest
        their shard's turn are taken (each shard keeps its own turns: they compare by distance
        from them), so no shard waits behind another, and a wake-up costs one read, not one
        per shard."""
        due, self._poll_due = self._poll_due, set()
        # Each page reads one id beyond the free slots: whether any was left behind is then
        # known, and a worker that took the last queued run does not read again when its slot
        # frees (one empty ZRANGE per turn of a full worker, otherwise).
        if len(self.queue_names) == 1:
            ids: list[bytes] = await self.pool.zrange(self.queue_names[0], 0, free)
            self.queue_may_hold_more = len(ids) > free
            return ids[:free]
        shards = range(len(self.queue_names)) if due is None else sorted(due)
        if not shards:
            return []
        async with self.pool.pipeline(transaction=False) as pipe:
            for shard in shards:
                pipe.zrange(self.queue_names[shard], 0, free, withscores=True)
                if self.fair_names:
                    pipe.hget(self.fair_names[shard], "v")
            replies = await pipe.execute()
        step = 2 if self.fair_names else 1
        pages: list[list[tuple[bytes, float]]] = replies[::step]
        in_service = [float(v or 0) for v in replies[1::2]] if self.fair_names else []
        merged = sorted(
            (
                (run_id, turn - (in_service[i] if in_service else 0.0))
                for i, page in enumerate(pages)
                for run_id, turn in page
            ),
            key=lambda entry: entry[1],
        )
        self.queue_may_hold_more = len(merged) > free
        if self.queue_may_hold_more:
            self._poll_due = None  # what was left behind may be in any shard read
        return [run_id for run_id, _distance in merged[:free]]

    def _slot_freed(self, _task: asyncio.Task[None]) -> None:
        self.job_counter -= 1

    async def _deliver(self, run_id: str) -> None:
        """One delivery: the handler claims the run and drives it. The queue's timeout is a
        backstop behind the turn's own; a failure is logged, never propagated to the loop."""
        assert self.handler is not None, "queue_worker sets the handler"
        try:
            async with asyncio.timeout(self.job_timeout_s):
                outcome = await self.handler.run(run_id)
        except asyncio.CancelledError:
            self.jobs_retried += 1
            raise
        except TimeoutError:
            self.jobs_failed += 1
            log.error(
                "run %s: delivery exceeded the queue's timeout (%.0fs)", run_id, self.job_timeout_s
            )
        except Exception:
            self.jobs_failed += 1
            log.exception("run %s: delivery failed", run_id)
        else:
            self.jobs_complete += 1
            log.debug("run %s: delivery ended %s", run_id, outcome)

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
            # Stopped while waiting for Redis: nothing was started but what the handler
            # started before it (its metrics endpoint).
            if self.handler is not None:
                await self.handler.stop()
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
        """A finished job frees a slot: wake the loop so a waiting job starts at once (when
        the last poll may have left one in the queue)."""
        self._watched &= set(self.tasks)
        for job_id, task in self.tasks.items():
            if job_id not in self._watched:
                self._watched.add(job_id)
                task.add_done_callback(self._slot_freed_wake)

    def _slot_freed_wake(self, _task: asyncio.Task[None]) -> None:
        if self.queue_may_hold_more:
            self.wake_event.set()

    async def _burst_done(self) -> bool:
        if 0 <= self.max_burst_jobs <= self._jobs_started():
            await asyncio.gather(*self.tasks.values())
            return True
        if sum([await self.pool.zcard(name) for name in self.queue_names]) == 0:
            await asyncio.gather(*self.tasks.values())
            # A run held at its tenant's running limit is back in the turn order once one of
            # the tenant's runs ended: done only if none came back.
            return bool(sum([await self.pool.zcard(name) for name in self.queue_names]) == 0)
        return False


class JobHandler(Protocol):
    """What a worker process does with the queue's deliveries; it never sees arq's ctx."""

    async def start(self, worker: WakeableWorker) -> None:
        """Before the first delivery (the event loop is running)."""

    async def run(self, run_id: str) -> str:
        """One delivery of a run id taken from the queue (claim it, then drive it); what it
        returns is only logged."""

    async def stop(self) -> None:
        """After the last delivery ended (also when ``start`` failed part-way)."""


def queue_worker(
    redis: RedisSettings,
    settings: WorkerSettings,
    handler: JobHandler,
    *,
    handle_signals: bool = True,
    burst: bool = False,
) -> WakeableWorker:
    """The queue loop on hermes-queue's queue, handing each delivery to ``handler``; our turn
    timeout acts first. arq needs a registered function to start; it is never dispatched."""

    async def run_turn(ctx: dict[str, Any], run_id: str) -> str:
        raise RuntimeError(f"arq dispatched {run_id}: the queue loop delivers runs itself")

    async def on_startup(_ctx: dict[str, Any]) -> None:
        await handler.start(worker)

    async def on_shutdown(_ctx: dict[str, Any]) -> None:
        await handler.stop()

    keys = redis.keys
    # On a Redis Cluster arq's own pool (a plain client) cannot serve every shard: the loop
    # runs on a cluster client instead, for the single-key calls arq makes (its health line).
    pool = cast("ArqRedis", connect(redis)) if redis.cluster else None
    worker = WakeableWorker(
        functions=[func(run_turn, name=RUN_TURN)],
        queue_name=keys.queue_at(0),
        redis_pool=pool,
        redis_settings=redis_settings(redis),
        burst=burst,
        on_startup=on_startup,
        on_shutdown=on_shutdown,
        handle_signals=handle_signals,
        job_completion_wait=int(settings.drain_seconds),
        max_jobs=settings.concurrency,
        # Our own turn timeout fails the run cleanly; arq's is only a backstop behind it.
        job_timeout=job_timeout_seconds(settings.job_timeout_seconds),
        keep_result=0,
        poll_delay=settings.poll_seconds,
        health_check_key=keys.health_check,
        job_serializer=serialize,
        job_deserializer=deserialize,
        log_results=False,
    )
    worker.handler = handler
    worker.queue_names = [keys.turn_order_at(shard) for shard in keys.shard_ids]
    worker.fair_names = [keys.fair_at(shard) for shard in keys.shard_ids]
    worker.wait_for_redis = functools.partial(wait_until_answering, redis, "worker")
    return worker
