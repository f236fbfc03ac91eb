"""What hermes-queue relies on in arq, pinned: an arq upgrade that changes any of it fails here.

arq's ``Worker`` is the queue loop's process shell (signal handling and drain, the health line,
burst mode); ``WakeableWorker`` replaces its ``main``, ``_poll_iteration`` and ``close`` and
reads its private state, and none of arq's per-job protocol (job keys, in-progress markers,
retry counters, results) is used. If one of these tests fails after an arq upgrade, re-read the
arq code it names against ``hermes_queue/jobqueue``, adapt it, then update the expectation and
the arq range in pyproject.toml.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import re
import textwrap
from typing import Any

import pytest
from arq.worker import Worker

from hermes_queue.config import Settings
from hermes_queue.jobqueue.worker import WakeableWorker, queue_worker
from hermes_queue.keys import Keys
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest

# The source of every arq Worker method that WakeableWorker mirrors, replaces, calls or relies
# on, as sha256 prefixes (typing spellings normalised: List[...] and list[...] hash alike).
# Checked against arq 0.26.3, 0.27.0 and 0.28.0. Why each matters:
#   main             WakeableWorker.main is a copy of it with the wait swapped
#   close            replaced (arq's raises CancelledError without signal handling)
#   _poll_iteration  replaced by our pickup (its task bookkeeping is mirrored)
#   handle_sig       called by our handle_sig: cancels the tasks and the main task
#   handle_sig_wait_for_completion, _wait_for_tasks_to_complete, _sleep_until_tasks_complete
#                    the drain on SIGTERM: stop picking, wait for ``tasks``, cancel the rest
#   heart_beat, record_health   called by our poll: the health line (no cron jobs here)
#   _jobs_started    burst bookkeeping, called by our main (our deliveries count into it)
ARQ_WORKER_SOURCES = {
    "main": "0ecb21ce3368eccd",
    "close": "d14f94e939753f5e",
    "_poll_iteration": "489ccd5a28868742",
    "handle_sig": "c2b96e67b9157b33",
    "handle_sig_wait_for_completion": "1b81b6b366fbb319",
    "_wait_for_tasks_to_complete": "e507e061554955c0",
    "_sleep_until_tasks_complete": "2eb4b894dc74b709",
    "heart_beat": "f2efb4160140423a",
    "record_health": "f9fd382757f5f327",
    "_jobs_started": "b9cdaffd67067786",
}

# Worker state WakeableWorker and queue_worker read or write.
ARQ_WORKER_ATTRIBUTES = (
    "_pool",
    "pool",
    "tasks",
    "job_counter",
    "max_jobs",
    "max_burst_jobs",
    "poll_delay_s",
    "burst",
    "allow_pick_jobs",
    "ctx",
    "on_startup",
    "on_shutdown",
    "after_job_end",
    "redis_settings",
    "job_serializer",
    "job_deserializer",
    "queue_name",
    "expires_extra_ms",
    "health_check_key",
    "main_task",
    "functions",
    "job_timeout_s",
    "jobs_complete",
    "jobs_failed",
    "jobs_retried",
)


def _source_hash(name: str) -> str:
    source = textwrap.dedent(inspect.getsource(getattr(Worker, name)))
    source = re.sub(r"\b(List|Tuple|Dict|Set)\[", lambda m: m.group(1).lower() + "[", source)
    return hashlib.sha256(source.encode()).hexdigest()[:16]


class RecordingHandler:
    """A JobHandler that notes each delivery and what was in Redis when it ran."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self.runs: list[str] = []
        self.per_job_keys: dict[str, int] = {}

    async def start(self, worker: WakeableWorker) -> None:
        pass

    async def run(self, run_id: str) -> str:
        self.runs.append(run_id)
        self.per_job_keys[run_id] = await self.redis.exists(
            f"arq:job:{run_id}", f"arq:in-progress:{run_id}", f"arq:retry:{run_id}"
        )
        return "done"

    async def stop(self) -> None:
        pass


def test_arq_worker_code_we_mirror_or_rely_on_is_unchanged() -> None:
    changed = {
        name: _source_hash(name)
        for name, expected in ARQ_WORKER_SOURCES.items()
        if _source_hash(name) != expected
    }
    assert not changed, f"arq's Worker changed; re-read these against jobqueue/: {changed}"


async def test_the_worker_has_the_state_we_touch_and_our_settings(settings: Settings) -> None:
    worker = queue_worker(
        settings.redis, settings.worker, RecordingHandler(None), handle_signals=False
    )
    missing = [name for name in ARQ_WORKER_ATTRIBUTES if not hasattr(worker, name)]
    assert not missing, f"arq's Worker lost attributes WakeableWorker uses: {missing}"
    for name, params in {
        "start_jobs": ["self", "job_ids"],
        "handle_sig": ["self", "signum"],
        "main": ["self"],
        "close": ["self"],
    }.items():
        assert list(inspect.signature(getattr(Worker, name)).parameters) == params, name
    assert worker.keep_result_s == 0  # never an arq:result:<id> key


async def test_a_delivery_runs_the_queued_id_and_writes_no_per_job_key(
    redis: Any, settings: Settings
) -> None:
    """The run id a run script queued is handed to the handler as is; arq's per-job keys are
    never written, and the queue entry is left to the handler's claim (here: none)."""
    run_id = new_run_id()
    assert await RunRepository(redis, settings.redis.keys, settings.runs).create(
        NewRun(run_id, "s", TurnRequest())
    )
    handler = RecordingHandler(redis)
    worker = queue_worker(
        settings.redis, settings.worker, handler, handle_signals=False, burst=True
    )
    worker.max_burst_jobs = 1
    try:
        await asyncio.wait_for(worker.start(), 10)
    finally:
        await worker.close()
    assert handler.runs == [run_id]
    assert handler.per_job_keys == {run_id: 0}
    assert worker.jobs_complete == 1
    keys = Keys(settings.redis.namespace)
    await redis.zrem(keys.queue, run_id)
    await redis.zrem(keys.turn_order_at(0), run_id)


class QueueTakingHandler(RecordingHandler):
    """Takes each delivered run off the queue and the turn order, as the claim does, then holds
    it briefly."""

    def __init__(self, redis: Any, keys: Keys, expected: int) -> None:
        super().__init__(redis)
        self.keys = keys
        self.expected = expected
        self.all_taken = asyncio.Event()

    async def run(self, run_id: str) -> str:
        if not await self.redis.zrem(self.keys.queue, run_id):
            return "gone"
        await self.redis.zrem(self.keys.turn_order_at(0), run_id)
        self.runs.append(run_id)
        if len(self.runs) == self.expected:
            self.all_taken.set()
        await asyncio.sleep(0.01)
        return "done"


async def test_runs_queued_beyond_the_free_slots_start_as_slots_free_without_the_timed_poll(
    redis: Any, settings: Settings
) -> None:
    """A poll that fills every slot may leave runs behind: each freed slot looks again at once
    (the timed poll here is a minute away, so it cannot be what finds them)."""
    settings = settings.replace(worker_concurrency=2, poll_seconds=60.0)
    queued = await queue_runs(redis, settings, 7)
    handler = QueueTakingHandler(redis, Keys(settings.redis.namespace), len(queued))
    await take_all(settings, handler)
    assert sorted(handler.runs) == sorted(queued)


async def queue_runs(redis: Any, settings: Settings, count: int) -> list[str]:
    repository = RunRepository(redis, settings.redis.keys, settings.runs)
    queued = [new_run_id() for _ in range(count)]
    for run_id in queued:
        assert await repository.create(NewRun(run_id, "s", TurnRequest()))
    return queued


async def take_all(settings: Settings, handler: QueueTakingHandler) -> None:
    """A worker delivering to ``handler`` until it took every run it expects."""
    worker = queue_worker(settings.redis, settings.worker, handler, handle_signals=False)
    task = worker.start()  # its start-up hook hands the worker to the handler (``start``)
    try:
        await asyncio.wait_for(handler.all_taken.wait(), 10)
    finally:
        task.cancel()
        await worker.close()


class FlagNotingHandler(QueueTakingHandler):
    """Notes, while each delivery runs, whether the worker expects runs left in the queue."""

    def __init__(self, redis: Any, keys: Keys, expected: int) -> None:
        super().__init__(redis, keys, expected)
        self.worker: WakeableWorker | None = None
        self.left_behind: list[bool] = []

    async def start(self, worker: WakeableWorker) -> None:
        self.worker = worker

    async def run(self, run_id: str) -> str:
        assert self.worker is not None
        self.left_behind.append(self.worker.queue_may_hold_more)
        return await super().run(run_id)


@pytest.mark.parametrize("queued", [1, 2])
async def test_a_worker_that_took_the_last_queued_run_reads_the_queue_again_only_when_woken(
    redis: Any, settings: Settings, queued: int
) -> None:
    """A poll reads one id beyond the free slots, so a one-slot worker knows whether it left
    runs behind: if not, its freed slot does not read the queue again (an empty read per turn
    of a full worker, before); if so, it does, and the runs left start."""
    settings = settings.replace(worker_concurrency=1, poll_seconds=60.0)
    runs = await queue_runs(redis, settings, queued)
    handler = FlagNotingHandler(redis, Keys(settings.redis.namespace), queued)
    await take_all(settings, handler)
    assert handler.runs == runs
    assert handler.left_behind[0] is (queued > 1)
