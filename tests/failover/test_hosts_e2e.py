"""Separate hosts: Redis, PostgreSQL (a proxy to the suite's), each API replica and each worker
in a network namespace of its own, joined by a bridge (``tests/support/netns.py``,
``tests/support/hosts.py``), so nothing can lean on 127.0.0.1 or a shared file. The test
talks to them from a client host.

Needs root and iproute2, which CI has; the namespaces are created and removed by each test.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermes_queue.agents.echo_tools import read_tool_log
from hermes_queue.agents.steps import LOST_TOOL_RESULT
from hermes_queue.client import iter_sse
from hermes_queue.config import Settings
from tests.conftest import store_variant
from tests.support.hosts import API_PORT, Spread, spread
from tests.support.load import Load, RunTrace, record_problems
from tests.support.polling import eventually
from tests.support.processes import Proc

SLOW = " ".join(f"w{i}" for i in range(40)) + " [slow:0.1]"  # ~4 s of deltas


@contextlib.asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[Spread]:
    """Two API hosts and two worker hosts on PostgreSQL (a fresh schema)."""
    async with store_variant(settings, "postgresql") as on_postgres, spread(on_postgres) as d:
        yield d


@pytest.mark.timeout(180)
async def test_runs_sessions_and_resume_across_hosts(settings: Settings) -> None:
    async with running(settings) as d:
        # A run created on one replica, read from the other, dropped and resumed there.
        load = Load(d.http, d.urls)
        run_id = await d.create(
            "across hosts " + " ".join(f"w{i}" for i in range(20)) + " [slow:0.02]"
        )
        trace = RunTrace(run_id, d.urls[0], time.monotonic())
        load.accepted.append(trace)
        await load.follow(trace, d.urls[1], drop_after=4)
        await load.settle_records()
        assert not trace.problems() and not record_problems(trace)
        assert trace.resumes == 1

        # Session chat on one replica, resumed on the other, transcript read from either.
        created = await d.http.post(f"{d.urls[0]}/api/sessions", json={"id": "s1"})
        assert created.status == 201
        response = await d.http.post(
            f"{d.urls[0]}/api/sessions/s1/chat/stream", json={"message": "hello hosts"}
        )
        turn = response.headers["X-Hermes-Run-Id"]
        first = None
        async for frame in iter_sse(response):
            if frame.data:
                first = frame
                break
        response.close()
        assert first is not None
        resumed = await d.http.get(
            f"{d.urls[1]}/api/sessions/s1/chat/stream",
            params={"run_id": turn},
            headers={"Last-Event-ID": first.id},
        )
        events = [f.event async for f in iter_sse(resumed) if f.data]
        assert events[-2:] == ["run.completed", "done"]
        page = await (await d.http.get(f"{d.urls[1]}/api/sessions/s1/messages")).json()
        assert [m["role"] for m in page["data"]] == ["user", "assistant"]
        again = await d.http.post(
            f"{d.urls[1]}/api/sessions/s1/chat", json={"message": "second turn"}
        )
        assert again.status == 200, await again.text()
        page = await (await d.http.get(f"{d.urls[0]}/api/sessions/s1/messages")).json()
        assert [m["role"] for m in page["data"]] == ["user", "assistant"] * 2

        # A process on another host than Redis, given a SQLite store, says so at start.
        host = next(iter(d.apis))
        local = d.cluster.settings.replace(
            host=host.address, port=API_PORT + 1, store_url="sqlite:///:memory:", store_schema=""
        )
        proc = d.cluster.spawn("api-sqlite", ["api"], local, host.launcher)
        await proc.wait_for_log("store_url is a SQLite file but Redis is on another host")


@pytest.mark.timeout(180)
async def test_cut_off_worker_is_retried_elsewhere_and_fenced_on_return(
    settings: Settings,
) -> None:
    async with running(settings.replace(max_attempts=3)) as d:
        run_id = await d.create(SLOW)
        load = Load(d.http, d.urls)
        trace = RunTrace(run_id, d.urls[0], time.monotonic())
        reader = asyncio.create_task(load.follow(trace, d.urls[1]))
        await eventually(lambda: _has(trace, "message.delta"), within=20, what="first delta")
        victim = await d.holder(run_id)
        assert victim is not None
        victim.cut()
        try:
            await eventually(
                lambda: _attempt_at_least(d, run_id, 2),
                within=settings.runs.lease_seconds + 10,
                what="retry",
            )
            assert await d.holder(run_id) != victim
        finally:
            victim.reconnect()
        await asyncio.wait_for(reader, 60)
        # Back on the network, the old worker writes again and is fenced off.
        pattern = re.compile(rf"run {run_id} attempt 1 (lost its lease|: terminal write fenced)")
        await eventually(
            lambda: _logged(d.workers[victim], pattern),
            within=30,
            what="the old worker's fenced write",
        )
        stream = await d.stream(run_id)
    restart = [e.type for e in stream].index("run.restarted")
    assert all(e.attempt >= 2 for e in stream[restart:])
    assert stream[-1].type == "run.completed" and stream[-1].attempt >= 2
    assert not trace.problems(), trace.problems()
    assert "run.restarted" in trace.events


@pytest.mark.timeout(180)
async def test_dead_worker_host_runs_restart_within_the_lease(settings: Settings) -> None:
    async with running(settings.replace(max_attempts=3)) as d:
        run_ids = [await d.create(SLOW, api=i % 2) for i in range(6)]
        load = Load(d.http, d.urls)
        traces = [RunTrace(r, d.urls[i % 2], time.monotonic()) for i, r in enumerate(run_ids)]
        load.accepted.extend(traces)
        readers = [asyncio.create_task(load.follow(t, d.urls[1 - i % 2])) for i, t in
                   enumerate(traces)]  # fmt: skip
        for trace in traces:
            await eventually(
                lambda t=trace: _has(t, "message.delta"), within=20, what="every run started"
            )
        holders = {r: await d.holder(r) for r in run_ids}
        victim = max(d.workers, key=lambda h: list(holders.values()).count(h))
        lost = [r for r, h in holders.items() if h == victim]
        killed = victim.kill_all()
        assert d.workers[victim].process.pid in killed
        budget = settings.runs.lease_seconds + 5
        for run_id in lost:
            await eventually(
                lambda r=run_id: _moved_on(d, r), within=budget, what=f"{run_id} restarted or ended"
            )
        await asyncio.wait_for(asyncio.gather(*readers), 60)
        await load.settle_records()
    for trace in traces:
        assert not trace.problems(), (trace.run_id, trace.problems())
        assert not record_problems(trace), (trace.run_id, trace.record)
    assert all("run.restarted" in t.events for t in traces if t.run_id in lost)


async def _has(trace: RunTrace, event: str) -> bool:
    return event in trace.events


async def _attempt_at_least(d: Spread, run_id: str, attempt: int) -> bool:
    record = await d.record(run_id)
    return int(record.get("attempt", 0)) >= attempt and record.get("status") == "running"


async def _moved_on(d: Spread, run_id: str) -> bool:
    record = await d.record(run_id)
    return int(record.get("attempt", 0)) >= 2 or record.get("status") in (
        "completed",
        "failed",
        "cancelled",
    )


async def _logged(proc: Proc, pattern: re.Pattern[str]) -> bool:
    return bool(pattern.search(proc.log()))


@pytest.mark.timeout(180)
async def test_worker_cut_off_mid_tool_is_fenced_and_its_turn_resumed(
    settings: Settings, tmp_path: Path
) -> None:
    """Durable steps across hosts: the worker running a tool is cut off past its lease; the
    other worker resumes the turn after the last recorded step (``run.resumed``, never
    ``run.restarted``), the cut-off call is not run again (its effect is unknown: the model is
    told so), and the old worker, back on the network, is fenced."""
    log = tmp_path / "tools.jsonl"  # the hosts share the filesystem, not the network
    tuned = settings.replace(max_attempts=3, echo_tool_log=str(log))
    async with running(tuned) as d:
        run_id = await d.create("cut [tool:alpha] [tool:beta] [slowtool:4]")
        await eventually(lambda: _tool_started(log, run_id, "call_1"), within=20, what="alpha")
        victim = await d.holder(run_id)
        assert victim is not None
        victim.cut()
        try:
            await eventually(
                lambda: _attempt_at_least(d, run_id, 2),
                within=settings.runs.lease_seconds + 10,
                what="resume",
            )
        finally:
            victim.reconnect()
        await eventually(lambda: _ended(d, run_id), within=60, what="the run's end")
        pattern = re.compile(rf"run {run_id} attempt 1 (lost its lease|: terminal write fenced)")
        await eventually(
            lambda: _logged(d.workers[victim], pattern), within=30, what="the old worker fenced"
        )
        stream = await d.stream(run_id)
    kinds = [e.type for e in stream]
    assert "run.resumed" in kinds and "run.restarted" not in kinds
    assert all(e.attempt >= 2 for e in stream[kinds.index("run.resumed") :])
    assert stream[-1].type == "run.completed"
    tools = [m for m in stream[-1].data["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tools] == [LOST_TOOL_RESULT, "ok"]
    starts = [line["call_id"] for line in read_tool_log(log) if line["phase"] == "start"]
    assert starts == ["call_1", "call_2"]  # alpha ran once, on the cut-off host only


async def _tool_started(log: Path, run_id: str, call_id: str) -> bool:
    return any(
        line["phase"] == "start" and line["run_id"] == run_id and line["call_id"] == call_id
        for line in read_tool_log(log)
    )


async def _ended(d: Spread, run_id: str) -> bool:
    return (await d.record(run_id)).get("status") in ("completed", "failed", "cancelled")
