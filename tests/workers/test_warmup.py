"""A worker warms its backend up before it takes its first run, and says so to its readiness
probe (``hermes-queue check --role worker``); a failed warm-up is visible there."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from hermes_queue.agents.echo import EchoBackend
from hermes_queue.cli import check as cli_check
from hermes_queue.config import Settings
from hermes_queue.jobqueue.worker import WakeableWorker
from hermes_queue.runs.model import NewRun, RunStatus
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.workers import worker as worker_module
from hermes_queue.workers.warmup import probe
from hermes_queue.workers.worker import build_worker
from tests.support.polling import eventually


class GatedWarmUp(EchoBackend):
    """An echo backend whose warm-up waits for the test, or fails."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def warm_up(self) -> None:
        self.entered.set()
        await self.release.wait()
        if self.fail:
            raise RuntimeError("tool registry could not be built")


@contextlib.asynccontextmanager
async def started(settings: Settings) -> AsyncIterator[WakeableWorker]:
    built = build_worker(settings, handle_signals=False)
    task = asyncio.create_task(built.main())
    try:
        yield built
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await built.close()


async def status_of(repo: RunRepository, run_id: str) -> str:
    record = await repo.get(run_id)
    assert record is not None
    return record.status


async def wait_for(repo: RunRepository, run_id: str, status: str) -> None:
    await eventually(
        lambda: status_of(repo, run_id), status.__eq__, within=10, what=f"{run_id} at {status}"
    )


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch, request: Any) -> GatedWarmUp:
    gated = GatedWarmUp(fail=getattr(request, "param", False))
    monkeypatch.setattr(worker_module, "load_backend", lambda *_a, **_k: gated)
    return gated


async def test_no_run_is_taken_and_the_probe_waits_until_the_warm_up_ends(
    redis: Any, settings: Settings, backend: GatedWarmUp
) -> None:
    settings = settings.replace(poll_seconds=0.05)
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    run_id = new_run_id()
    assert await repo.create(NewRun(run_id, "s", TurnRequest("hi")))
    assert not probe(settings.redis.namespace).ok  # no worker here yet
    async with started(settings):
        await asyncio.wait_for(backend.entered.wait(), 10)
        report = probe(settings.redis.namespace)
        assert not report.ok and report.detail == "still warming up"
        await asyncio.sleep(0.3)  # six poll periods: a worker taking jobs would have claimed it
        assert await status_of(repo, run_id) == RunStatus.QUEUED
        backend.release.set()
        await wait_for(repo, run_id, RunStatus.COMPLETED)
        check = cli_check.warm_up_check(settings)
        assert check.ok and check.detail.startswith("warmed up")
    assert probe(settings.redis.namespace).detail.startswith("no worker process")


@pytest.mark.parametrize("backend", [True], indirect=True)
async def test_a_failed_warm_up_fails_the_probe_and_the_worker_runs_cold(
    redis: Any, settings: Settings, backend: GatedWarmUp
) -> None:
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    backend.release.set()
    async with started(settings):
        run_id = new_run_id()
        assert await repo.create(NewRun(run_id, "s", TurnRequest("hi")))
        await wait_for(repo, run_id, RunStatus.COMPLETED)
        check = cli_check.warm_up_check(settings)
        assert not check.ok
        assert "warm-up failed" in check.detail
        assert "RuntimeError: tool registry could not be built" in check.detail
