"""What hermes-queue relies on in arq, pinned: an arq upgrade that changes any of it fails here.

The run scripts write arq's job keys and payloads themselves and ``WakeableWorker`` replaces
arq's ``main`` and ``close`` and reads its private state. If one of these tests fails after an
arq upgrade, re-read the arq code it names against ``hermes_queue/jobqueue`` (and the run
scripts in ``hermes_queue/runs/lua``), adapt them, then update the expectation and the arq range
in pyproject.toml.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import re
import textwrap
from typing import Any

import msgpack
from arq import constants
from arq.jobs import deserialize_job_raw, serialize_job
from arq.worker import Worker

from hermes_queue.config import Settings
from hermes_queue.jobqueue.jobs import (
    DELIVERY_LIMIT,
    IN_PROGRESS_PREFIX,
    RUN_TURN,
    deserialize,
    in_progress_key,
    in_progress_ttl_ms,
    job_key,
    queued_job,
    retry_key,
)
from hermes_queue.jobqueue.worker import WakeableWorker, queue_worker
from hermes_queue.keys import Keys
from hermes_queue.runs.repository import RunRepository, new_run_id

# The source of every arq Worker method that WakeableWorker mirrors, replaces, calls or relies
# on, as sha256 prefixes (typing spellings normalised: List[...] and list[...] hash alike).
# Checked against arq 0.26.3, 0.27.0 and 0.28.0. Why each matters:
#   main             WakeableWorker.main is a copy of it with the wait swapped
#   close            replaced (arq's raises CancelledError without signal handling)
#   _poll_iteration  called by our main: the pickup of due job ids
#   start_jobs       wrapped; sets the in-progress key for in_progress_timeout_s (orphaned.lua)
#   run_job          reads the job layout queued_job() writes; counts deliveries against
#                    max_tries; calls after_job_end with ctx["job_id"] (ensure_job)
#   finish_job       deletes the job key and queue entry of every delivery that ends, which is
#   finish_failed_job  why a requeued run needs ensure_job
#   handle_sig       called by our handle_sig: cancels the tasks and the main task
#   _jobs_started    burst bookkeeping, called by our main
ARQ_WORKER_SOURCES = {
    "main": "0ecb21ce3368eccd",
    "close": "d14f94e939753f5e",
    "_poll_iteration": "489ccd5a28868742",
    "start_jobs": "a38f54558b8cd0e0",
    "run_job": "3ba41d10a68f7bcc",
    "finish_job": "93bb5bdcf65892e5",
    "finish_failed_job": "103418320f3ae56c",
    "handle_sig": "c2b96e67b9157b33",
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
    "in_progress_timeout_s",
    "keep_result_s",
)


def _source_hash(name: str) -> str:
    source = textwrap.dedent(inspect.getsource(getattr(Worker, name)))
    source = re.sub(r"\b(List|Tuple|Dict|Set)\[", lambda m: m.group(1).lower() + "[", source)
    return hashlib.sha256(source.encode()).hexdigest()[:16]


class RecordingHandler:
    """A JobHandler that notes each delivery and what arq left in Redis at each step."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self.runs: list[str] = []
        self.in_progress_ttl_ms: int | None = None
        self.left_after: dict[str, int] = {}

    async def start(self, worker: WakeableWorker) -> None:
        pass

    async def run(self, run_id: str) -> str:
        self.runs.append(run_id)
        self.in_progress_ttl_ms = await self.redis.pttl(in_progress_key(run_id))
        return "done"

    async def delivery_ended(self, run_id: str) -> None:
        self.left_after[run_id] = await self.redis.exists(
            job_key(run_id), in_progress_key(run_id), retry_key(run_id)
        )

    async def stop(self) -> None:
        pass


def test_arq_key_names_are_the_ones_the_scripts_and_docs_use() -> None:
    assert (constants.job_key_prefix, constants.in_progress_key_prefix) == (
        "arq:job:",
        "arq:in-progress:",
    )
    assert constants.retry_key_prefix == "arq:retry:"
    assert job_key("run_1") == "arq:job:run_1"
    assert in_progress_key("run_1") == IN_PROGRESS_PREFIX + "run_1" == "arq:in-progress:run_1"
    assert retry_key("run_1") == "arq:retry:run_1"


def test_the_job_layout_the_scripts_write_is_what_arqs_worker_reads() -> None:
    job = queued_job("run_1")
    assert job.key == job_key("run_1")
    raw = msgpack.unpackb(job.payload, raw=False)
    assert set(raw) == {"t", "f", "a", "k", "et"}
    assert (raw["f"], raw["a"], raw["k"], raw["t"]) == (RUN_TURN, [], {"run_id": "run_1"}, None)
    function, args, kwargs, job_try, enqueued_ms = deserialize_job_raw(
        job.payload, deserializer=deserialize
    )
    assert (function, tuple(args), kwargs, job_try) == (RUN_TURN, (), {"run_id": "run_1"}, None)
    assert enqueued_ms == raw["et"] > 0
    assert list(inspect.signature(serialize_job).parameters) == [
        "function_name",
        "args",
        "kwargs",
        "job_try",
        "enqueue_time_ms",
        "serializer",
    ]


def test_arq_worker_code_we_mirror_or_rely_on_is_unchanged() -> None:
    changed = {
        name: _source_hash(name)
        for name, expected in ARQ_WORKER_SOURCES.items()
        if _source_hash(name) != expected
    }
    assert not changed, f"arq's Worker changed; re-read these against jobqueue/: {changed}"


async def test_the_worker_has_the_state_we_touch_and_our_settings(settings: Settings) -> None:
    worker = queue_worker(settings, RecordingHandler(None), handle_signals=False)
    missing = [name for name in ARQ_WORKER_ATTRIBUTES if not hasattr(worker, name)]
    assert not missing, f"arq's Worker lost attributes WakeableWorker uses: {missing}"
    for name, params in {
        "start_jobs": ["self", "job_ids"],
        "handle_sig": ["self", "signum"],
        "main": ["self"],
        "close": ["self"],
    }.items():
        assert list(inspect.signature(getattr(Worker, name)).parameters) == params, name
    # arq's in-progress TTL rule (largest job timeout + 10 s), which orphaned.lua reads ages by.
    assert worker.in_progress_timeout_s * 1000 == in_progress_ttl_ms(settings.job_timeout_seconds)
    run_function = worker.functions[RUN_TURN]
    assert getattr(run_function, "max_tries", None) == DELIVERY_LIMIT
    assert worker.keep_result_s == 0  # no arq:result:<id> key per run


async def test_a_delivery_runs_and_arq_then_drops_the_job_and_its_keys(
    redis: Any, settings: Settings
) -> None:
    """The job a run script wrote is run by arq's worker with the run id; the in-progress key
    lives as long as in_progress_ttl_ms says; when the delivery ends arq has deleted the job
    key, the in-progress and retry keys and the queue entry (hence ensure_job)."""
    run_id = new_run_id()
    assert await RunRepository(redis, settings).create(run_id=run_id, session_id="s", request={})
    handler = RecordingHandler(redis)
    worker = queue_worker(settings, handler, handle_signals=False, burst=True)
    try:
        await asyncio.wait_for(worker.start(), 10)
    finally:
        await worker.close()
    assert handler.runs == [run_id]
    full = in_progress_ttl_ms(settings.job_timeout_seconds)
    assert handler.in_progress_ttl_ms is not None
    assert full - 5_000 < handler.in_progress_ttl_ms <= full
    assert handler.left_after == {run_id: 0}
    assert await redis.zscore(Keys(settings.namespace).queue, run_id) is None
