"""Durable steps in one process, on real Redis (agents/steps.py, workers/resume.py): an attempt
records each finished step with its events, a later attempt resumes after the last one and
runs no recorded tool again, a tool in flight at the loss is declared lost (or run again when
read-only), and a stopping worker hands the run back at the next step boundary. The same under
SIGKILL, across processes: tests/e2e/test_durable_steps_e2e.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hermes_queue.agents.base import CancelToken
from hermes_queue.agents.echo import EchoBackend
from hermes_queue.agents.echo_tools import read_tool_log
from hermes_queue.agents.steps import LOST_TOOL_RESULT
from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.runs.attempt import StepWritten
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.streams.reader import read_range
from hermes_queue.workers.resume import build_request
from hermes_queue.workers.sink import RunEventSink
from hermes_queue.workers.turn import WorkerRuntime, run_turn
from tests.support.polling import eventually

TURN = "plan it [tool:alpha] [tool:beta] [slowtool:0.3]"


@pytest.fixture
def tool_log(tmp_path: Path) -> Path:
    return tmp_path / "tools.jsonl"


async def starts(log: Path) -> list[str]:
    return [line["call_id"] for line in read_tool_log(log) if line["phase"] == "start"]


async def lose_first_attempt(
    repo: RunRepository, redis: Any, keys: Keys, run_id: str, log: Path, *, until: str
) -> None:
    """Attempt 1 runs on an echo backend until the tool call ``until`` has started, then its
    worker is gone (the task dies with it) and its lease lapses: the reaper requeues the run."""
    attempt = await repo.claim(run_id, "lost-worker")
    assert attempt is not None
    backend = EchoBackend(tool_log=str(log))
    sink = RunEventSink(attempt)
    turn = asyncio.create_task(backend.run_turn(build_request(attempt), sink, CancelToken()))
    await eventually(lambda: starts(log), lambda calls: until in calls, what=f"{until} running")
    turn.cancel()
    await asyncio.gather(turn, return_exceptions=True)
    await redis.zadd(keys.leases, {run_id: 0})
    assert await repo.leases.reap(run_id) == "requeued"


async def events_of(redis: Any, keys: Keys, run_id: str) -> list[Any]:
    return await read_range(redis, keys, run_id, None, 1000)


async def test_a_resumed_turn_runs_no_finished_tool_again_and_declares_the_lost_one(
    redis: Any, settings: Settings, keys: Keys, tool_log: Path
) -> None:
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    run_id = new_run_id()
    await repo.create(NewRun(run_id, "s", TurnRequest(TURN)))
    await lose_first_attempt(repo, redis, keys, run_id, tool_log, until="call_2")
    record = await repo.get(run_id)
    # Model call 0, alpha's start and result, model call 1 (asking for beta), beta's start.
    assert record is not None and record.steps == 5

    runtime = WorkerRuntime("w2", repo, EchoBackend(tool_log=str(tool_log)))
    assert await run_turn(runtime, run_id) == "completed"

    assert await starts(tool_log) == ["call_1", "call_2"]  # neither ran twice
    events = await events_of(redis, keys, run_id)
    resumed = [e for e in events if e.type == "run.resumed"]
    assert len(resumed) == 1 and resumed[0].data["valid_through"] == record.step_event
    assert not [e for e in events if e.type == "run.restarted"]
    completed = events[-1]
    assert completed.type == "run.completed"
    tools = [m for m in completed.data["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tools] == [
        ("call_1", "ok"),
        ("call_2", LOST_TOOL_RESULT),
    ]
    # Readers: the text streamed before the loss stands; nothing of it was said twice.
    text = "".join(e.data["delta"] for e in events if e.type == "message.delta")
    assert text == completed.data["output"]


async def test_a_read_only_tool_in_flight_runs_again(
    redis: Any, settings: Settings, keys: Keys, tool_log: Path
) -> None:
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    run_id = new_run_id()
    message = "look [tool:read_file] [slowtool:0.3]"
    await repo.create(NewRun(run_id, "s", TurnRequest(message)))
    await lose_first_attempt(repo, redis, keys, run_id, tool_log, until="call_1")
    runtime = WorkerRuntime("w2", repo, EchoBackend(tool_log=str(tool_log)))
    assert await run_turn(runtime, run_id) == "completed"
    assert await starts(tool_log) == ["call_1", "call_1"]  # known to have no effect: re-run
    completed = (await events_of(redis, keys, run_id))[-1]
    tools = [m["content"] for m in completed.data["messages"] if m["role"] == "tool"]
    assert tools == ["ok"]


async def test_a_stopping_worker_hands_the_run_back_at_the_next_step(
    redis: Any, settings: Settings, keys: Keys, tool_log: Path
) -> None:
    """The drain lasts one step: the turn is handed back as soon as the step in progress is
    recorded, and the next worker finishes it without running any tool again."""
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    run_id = new_run_id()
    message = "go [tool:alpha] [tool:beta] [tool:gamma] [slowtool:0.2]"
    await repo.create(NewRun(run_id, "s", TurnRequest(message)))
    stopping = asyncio.Event()
    first = WorkerRuntime(
        "w1", repo, EchoBackend(tool_log=str(tool_log)), shutting_down=stopping.is_set
    )
    turn = asyncio.create_task(run_turn(first, run_id))
    await eventually(lambda: starts(tool_log), lambda calls: "call_1" in calls, what="alpha")
    stopping.set()  # SIGTERM while alpha runs
    assert await turn == "handed_back"
    record = await repo.get(run_id)
    assert record is not None and record.status == "queued"
    assert await starts(tool_log) == ["call_1"]  # alpha finished; beta never started here

    second = WorkerRuntime("w2", repo, EchoBackend(tool_log=str(tool_log)))
    assert await run_turn(second, run_id) == "completed"
    assert await starts(tool_log) == ["call_1", "call_2", "call_3"]
    events = await events_of(redis, keys, run_id)
    assert [e.type for e in events].count("run.resumed") == 1
    tools = [m["content"] for m in events[-1].data["messages"] if m["role"] == "tool"]
    assert tools == ["ok", "ok", "ok"]


async def test_steps_are_fenced_by_attempt(redis: Any, settings: Settings) -> None:
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    run_id = new_run_id()
    await repo.create(NewRun(run_id, "s", TurnRequest("x")))
    stale = await repo.claim(run_id, "w1")
    assert stale is not None
    await redis.zadd(Keys(settings.redis.namespace).leases, {run_id: 0})
    assert await repo.leases.reap(run_id) == "requeued"
    live = await repo.claim(run_id, "w2")
    assert live is not None
    assert await stale.append_step([], {"kind": "model", "index": 0}, "t1") is None
    assert await live.append_step([], {"kind": "model", "index": 0}, "t2") == StepWritten([], ())
    # A retried call (its reply lost) records nothing twice.
    assert await live.append_step([], {"kind": "model", "index": 0}, "t2") == StepWritten([], ())
    assert [s["attempt"] for s in await repo.steps(run_id)] == [2]
