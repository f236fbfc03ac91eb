"""Start order does not matter: a worker started before Redis (or pointed at something that is
not Redis yet) waits for it, saying so once per change of state, then runs what is queued.
Before, it retried five times and exited with a traceback: a crash loop on Kubernetes."""

from __future__ import annotations

import redis.asyncio as aioredis

from hermes_queue.config import Settings
from hermes_queue.redisio.embedded import EmbeddedRedis, free_port
from hermes_queue.runs.model import NewRun, RunStatus
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from tests.support.not_redis import http_server
from tests.support.polling import eventually
from tests.support.processes import START_WITHIN, Cluster


async def test_a_worker_started_before_redis_waits_for_it_then_runs(settings: Settings) -> None:
    port = free_port()
    local = settings.replace(redis_url=f"redis://127.0.0.1:{port}/0", log_level="DEBUG")
    cluster = Cluster(local)
    worker = cluster.spawn("worker", ["worker"], local)
    server: EmbeddedRedis | None = None
    try:
        await worker.wait_for_log("is not reachable")

        def retries() -> int:
            return worker.log().count("still failing")

        await eventually(retries, lambda n: n >= 2, what="two more attempts")
        with http_server(port):  # now something answers there, but not Redis
            await worker.wait_for_log("answers, but not as Redis")
            seen = retries()
            await eventually(retries, lambda n: n >= seen + 1, within=10, what="another try")
        server = EmbeddedRedis.start(port)
        await worker.wait_for_log("ready (", within=START_WITHIN)

        client = aioredis.Redis.from_url(server.url)
        try:
            runs = RunRepository(client, local.redis.keys, local.runs)
            assert await runs.create(NewRun("run_late", "s_late", TurnRequest("after all")))

            async def status() -> str | None:
                record = await runs.get("run_late")
                return None if record is None else record.status

            await eventually(status, lambda s: s == RunStatus.COMPLETED, within=20)
        finally:
            await client.aclose()
        assert worker.terminate() == 0
    finally:
        cluster.stop_all()
        if server is not None:
            server.stop()
    log = worker.log()
    assert "Traceback" not in log
    waits = [line for line in log.splitlines() if "WARNING" in line and "worker: redis_url" in line]
    # One line per state (not reachable, not Redis, maybe not reachable again), not per try.
    assert 2 <= len(waits) <= 3 and len(waits) < retries_in(log), waits
    assert "worker: redis_url redis://127.0.0.1:" in waits[0]
    assert "answers again" in log


def retries_in(log: str) -> int:
    return log.count("still failing")
