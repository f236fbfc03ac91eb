"""Scheduled jobs across OS processes: an API and two workers firing a job every 2 seconds.

The schedule is a real one upstream accepts (a cron expression whose sixth field is seconds),
so real ticks come due on the real clock; the workers look for due ticks every 0.1 s. Checked
the way a user would: each tick yields exactly one run (the job's runs, every run record in
Redis, and the session transcript agree), also after one worker is SIGKILLed between ticks and
a replacement joins; and ticks missed while no worker was up fire once when one comes back.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

import aiohttp
import pytest

from hermes_queue.config import Settings
from hermes_queue.schedules.firing import tick_run_id
from tests.ops.conftest import scrape_port, value
from tests.support.polling import eventually
from tests.support.ports import unclaimed_port
from tests.support.processes import Cluster

EVERY_2S = "* * * * * */2"
TICK = 2.0


def instant(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


class Jobs:
    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http, self.url = http, url

    async def create(self, **body: Any) -> dict[str, Any]:
        async with self.http.post(f"{self.url}/api/jobs", json=body) as response:
            assert response.status == 200, await response.text()
            return dict((await response.json())["job"])

    async def get(self, job_id: str) -> dict[str, Any]:
        async with self.http.get(f"{self.url}/api/jobs/{job_id}") as response:
            assert response.status == 200, await response.text()
            return dict((await response.json())["job"])

    async def post(self, path: str) -> dict[str, Any]:
        async with self.http.post(f"{self.url}{path}") as response:
            assert response.status == 200, await response.text()
            return dict(await response.json())

    async def messages(self, session_id: str) -> list[dict[str, Any]]:
        async with self.http.get(f"{self.url}/api/sessions/{session_id}/messages") as response:
            return list((await response.json())["data"])

    async def completed_runs(self, job_id: str, at_least: int) -> dict[str, Any]:
        def done(job: dict[str, Any]) -> bool:
            finished = [r for r in job["runs"] if r["status"] == "completed"]
            return len(finished) >= at_least

        return dict(
            await eventually(lambda: self.get(job_id), done, within=40, what=f"{at_least} runs")
        )


def runs_in_redis(cluster: Cluster, session_id: str) -> set[str]:
    """The ids of every run record of the namespace on this session."""
    client = cluster.redis()
    try:
        found = set()
        for key in client.scan_iter(match=f"{cluster.settings.redis.namespace}:run:*", count=500):
            if not key.endswith(b"}"):  # a run's events, steps or readers: not its record
                continue
            run_id, session = client.hmget(key, ["run_id", "session_id"])
            if session == session_id.encode():
                found.add(run_id.decode())
        return found
    finally:
        client.close()


@pytest.mark.timeout(150)
async def test_each_tick_fires_once_with_two_workers_and_one_killed(
    store_settings: Settings,
) -> None:
    settings = store_settings.replace(scheduler_interval_seconds=0.1)
    cluster = Cluster(settings)
    try:
        url = await cluster.start_api()
        first, second = await cluster.start_worker(), await cluster.start_worker()
        headers = {"Authorization": f"Bearer {settings.api.api_key}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            jobs = Jobs(http, url)
            job = await jobs.create(name="pulse", schedule=EVERY_2S, prompt="tick", repeat=6)
            await jobs.completed_runs(job["id"], 2)
            first.kill()  # SIGKILL between ticks: no drain, no goodbye
            killed_at = time.time()
            await jobs.completed_runs(job["id"], 4)
            third = await cluster.start_worker()  # a replacement joins
            done = await jobs.completed_runs(job["id"], 6)
            done = await eventually(
                lambda: jobs.get(job["id"]), lambda j: j["state"] == "completed", within=20
            )
            messages = await jobs.messages(job["session_id"])

        runs = done["runs"]
        ticks = sorted(instant(r["tick"]) for r in runs)
        assert len(runs) == 6 and len(set(ticks)) == 6
        assert all(tick % TICK == 0 for tick in ticks)  # on the 2 s grid, none twice
        assert ticks[0] == instant(job["next_run_at"])
        assert {r["run_id"] for r in runs} == {
            tick_run_id(settings.redis.namespace, job["id"], t) for t in ticks
        }
        assert all(r["status"] == "completed" for r in runs)
        assert all(r["output"].startswith("Echo: tick") for r in runs)
        assert (done["enabled"], done["repeat"], done["next_run_at"]) == (
            False,
            {"times": 6, "completed": 6},
            None,
        )
        # Nothing else was created: one run record per tick, and six turns in the session.
        in_redis = runs_in_redis(cluster, job["session_id"])
        assert set(in_redis) == {r["run_id"] for r in runs}
        assert [m["role"] for m in messages] == ["user", "assistant"] * 6
        # Ticks kept firing, once each, after the kill (by the survivor, then with the
        # replacement too).
        assert first.process.poll() is not None
        assert second.process.poll() is None and third.process.poll() is None
        assert len([r for r in runs if instant(r["tick"]) > killed_at]) >= 3
    finally:
        cluster.stop_all()


@pytest.mark.timeout(120)
async def test_ticks_missed_with_no_worker_fire_once_on_return(settings: Settings) -> None:
    settings = settings.replace(scheduler_interval_seconds=0.1)
    cluster = Cluster(settings)
    try:
        url = await cluster.start_api()
        headers = {"Authorization": f"Bearer {settings.api.api_key}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            jobs = Jobs(http, url)
            job = await jobs.create(name="pulse", schedule=EVERY_2S, prompt="tick")
            first_tick = instant(job["next_run_at"])
            # No worker is up: wait (for the clock, not for a result) until three ticks went by.
            await asyncio.sleep(max(0.0, first_tick + 2 * TICK + 0.5 - time.time()))
            assert (await jobs.get(job["id"]))["runs"] == []
            port = unclaimed_port()
            back = time.time()
            await cluster.start_worker(metrics_port=port, metrics_port_span=1)
            fired = await jobs.completed_runs(job["id"], 2)
            await jobs.post(f"/api/jobs/{job['id']}/pause")
            samples = await scrape_port(port)

        ticks = sorted(instant(r["tick"]) for r in fired["runs"])
        # The oldest missed tick fired once; the next fire is a tick after the return.
        assert ticks[0] == first_tick
        assert ticks[1] > back and ticks[1] % TICK == 0
        missed = value(samples, "hermes_queue_job_missed_ticks_total")
        assert missed is not None and missed >= 2
        fires = value(samples, "hermes_queue_job_fires_total", trigger="schedule")
        assert fires is not None and fires >= 2
    finally:
        cluster.stop_all()
