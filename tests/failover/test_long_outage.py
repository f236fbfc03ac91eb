"""Redis away for longer than a lease, every worker alive: no run may be taken from its worker.

A lease's deadline is Redis' clock, which runs on while no process can reach Redis (a primary
that Sentinel needs longer than ``lease_seconds`` to replace, a restart, a stall). When Redis is
back, each live worker renews its leases within a heartbeat, but a reaper pass that comes first
would find every lease lapsed and restart every run in flight (the readers told
``run.restarted``, a tool call in flight marked lost). The test kills a private Redis while a
run is held mid-reply and starts it again from its append-only file a lease and a half later,
as a supervisor would; before ``leases_heard`` (``runs/lua/prelude.lua``) the run restarted.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_queue.client import HermesQueueClient
from hermes_queue.config import Settings
from hermes_queue.redisio.embedded import bundled_redis_server, free_port
from tests.support.processes import Cluster, starts_processes
from tests.support.redis_group import Node

pytestmark = starts_processes(2)


@pytest.fixture
def private_redis() -> Iterator[Node]:
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="hq-outage-"))
    args = [bundled_redis_server(), "--port", str(port), "--bind", "127.0.0.1"]
    persisted = ["--save", "", "--appendonly", "yes", "--appendfsync", "always"]
    node = Node("redis", "127.0.0.1", port, [*args, *persisted], workdir)
    node.start()
    try:
        yield node
    finally:
        node.kill()
        shutil.rmtree(workdir, ignore_errors=True)


async def test_a_run_keeps_its_live_worker_through_an_outage_longer_than_its_lease(
    settings: Settings, private_redis: Node, tmp_path: Path
) -> None:
    settings = settings.replace(redis_url=f"redis://127.0.0.1:{private_redis.port}/0")
    cluster = Cluster(settings)
    try:
        url = await cluster.start_api(max_attempts=2)
        await cluster.start_worker(max_attempts=2)
        gate = tmp_path / "gate"
        async with HermesQueueClient(url, settings.api.api_key, reconnect_delay=0.05) as client:
            run_id = await client.create_run(f"through the outage [gate:{gate}]")
            seen = None
            async for event_id, payload in client.iter_events(run_id):
                if payload["event"] == "message.delta":
                    seen = event_id
                    break
            assert seen is not None
            private_redis.kill()  # restarted from its append-only file, as a supervisor would
            # The outage is the fault itself: a lease and a half with no Redis to reach.
            await asyncio.sleep(settings.runs.lease_seconds * 1.5)
            private_redis.start()
            gate.touch()
            tail = [payload async for _, payload in client.iter_events(run_id, after=seen)]
            status = await client.get_run(run_id)
        names = [payload["event"] for payload in tail]
        assert "run.restarted" not in names, names
        assert names[-1] == "run.completed", names
        assert status["status"] == "completed" and status["attempt"] == 1, status
    finally:
        cluster.stop_all()


async def test_a_run_streaming_through_an_outage_longer_than_its_lease_goes_on(
    settings: Settings, private_redis: Node
) -> None:
    """Its appends wait for Redis (``workers/appends.py``: as long as a failover takes, where
    ~8 s of retries used to fail the turn) while the agent goes on: once Redis is back every
    delta reaches the stream once, in order, and the run completes as its first attempt."""
    settings = settings.replace(redis_url=f"redis://127.0.0.1:{private_redis.port}/0")
    cluster = Cluster(settings)
    try:
        url = await cluster.start_api(max_attempts=2)
        await cluster.start_worker(max_attempts=2)
        async with HermesQueueClient(url, settings.api.api_key, reconnect_delay=0.05) as client:
            run_id = await client.create_run("streaming through the outage [slow:0.2]")
            async for _, payload in client.iter_events(run_id):
                if payload["event"] == "message.delta":
                    break
            private_redis.kill()
            # Longer than the lease and than the ~8 s of retries a turn's writes had before.
            await asyncio.sleep(10)
            private_redis.start()
            events = [(event_id, payload) async for event_id, payload in client.iter_events(run_id)]
            status = await client.get_run(run_id)
        names = [payload["event"] for _, payload in events]
        assert "run.restarted" not in names, names
        assert names[-1] == "run.completed", names
        text = "".join(p["delta"] for _, p in events if p["event"] == "message.delta")
        assert text == events[-1][1]["output"]
        assert len({event_id for event_id, _ in events}) == len(events)
        assert status["status"] == "completed" and status["attempt"] == 1, status
    finally:
        cluster.stop_all()
