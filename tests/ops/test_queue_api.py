"""``GET /v1/queue`` and ``GET /v1/queue/stream``: shape, paging, workers, live snapshots."""

from __future__ import annotations

import time
from typing import Any

import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient

from hermes_queue.client import iter_sse
from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from tests.support.inprocess import running_api, running_worker
from tests.support.polling import eventually


async def fake_in_flight(redis: aioredis.Redis, keys: Keys, count: int) -> list[str]:
    """Leased runs written straight into Redis, leases an hour out (no reaper touches them)."""
    now = time.time()
    ids = [f"run_fake{i}" for i in range(count)]
    async with redis.pipeline(transaction=False) as pipe:
        for i, run_id in enumerate(ids):
            pipe.hset(
                keys.run(run_id),
                mapping={
                    "run_id": run_id,
                    "session_id": f"s{i}",
                    "status": "running",
                    "worker": "w1",
                    "attempt": 1,
                    "created_at": now - 30,
                    "started_at": now - 20,
                },
            )
            pipe.zadd(keys.leases, {run_id: int((now + 3600) * 1000) + i})
        await pipe.execute()
    return ids


async def test_queue_snapshot_shape_and_paging(
    settings: Settings, redis: aioredis.Redis, keys: Keys
) -> None:
    ids = await fake_in_flight(redis, keys, 5)
    async with running_api(settings) as api:
        assert (await api.get("/v1/queue", headers={"Authorization": ""})).status == 401
        body = await (await api.get("/v1/queue?limit=2")).json()
        assert body["object"] == "hermes.queue"
        assert body["depth"] == {"ready": 0, "deferred": 0, "running": 5, "blocked": 0}
        assert body["oldest_ready_age_seconds"] == 0
        assert set(body["workers"]) == {"count", "slots", "busy", "free_slots", "desired", "data"}
        assert body["workers"]["desired"] == 1
        assert set(body["throughput"]) == {
            "window_seconds",
            "claimed",
            "completed",
            "failed",
            "cancelled",
            "claims_per_second",
        }
        first = body["in_flight"]
        assert (first["total"], first["limit"], first["offset"]) == (5, 2, 0)
        run = first["data"][0]
        assert run["run_id"] == ids[0]
        assert (run["session_id"], run["status"], run["worker"], run["attempt"]) == (
            "s0",
            "running",
            "w1",
            1,
        )
        assert 19 <= run["age_seconds"] < 3600

        seen = []
        for offset in (0, 2, 4):
            page = await (await api.get(f"/v1/queue?limit=2&offset={offset}")).json()
            seen += [r["run_id"] for r in page["in_flight"]["data"]]
        assert seen == ids  # lease deadlines order the set
        beyond = await (await api.get("/v1/queue?offset=10")).json()
        assert beyond["in_flight"]["data"] == []

        for query in ("limit=0", "limit=501", "limit=x", "offset=-1"):
            response = await api.get(f"/v1/queue?{query}")
            assert response.status == 400, query
            assert (await response.json())["error"]["code"].startswith("invalid_")


async def test_live_workers_and_their_slots(settings: Settings) -> None:
    async with running_api(settings) as api, running_worker(settings):
        body = await eventually(
            lambda: _json(api, "/v1/queue"),
            lambda b: b["workers"]["count"] == 1,
            what="the worker's heartbeat",
        )
        workers = body["workers"]
        assert workers["slots"] == settings.worker.concurrency
        assert workers["free_slots"] == settings.worker.concurrency
        assert workers["desired"] == 0
        (worker,) = workers["data"]
        assert worker["slots"] == settings.worker.concurrency and worker["busy"] == 0
        assert worker["seen_seconds_ago"] < settings.runs.lease_seconds


async def _json(api: TestClient, path: str) -> Any:
    response = await api.get(path)
    assert response.status == 200
    return await response.json()


async def test_queue_stream_sends_snapshots_until_the_client_leaves(settings: Settings) -> None:
    async with running_api(settings.replace(queue_stream_interval_seconds=0.05)) as api:
        assert (await api.get("/v1/queue/stream", headers={"Authorization": ""})).status == 401
        response = await api.get("/v1/queue/stream?limit=5")
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert (await api.post("/v1/runs", json={"input": "hi"})).status == 202
        frames = []
        async for frame in iter_sse(response):
            if frame.event == "queue":
                frames.append(frame.json())
            if (len(frames) >= 2 and frames[-1]["depth"]["ready"] == 1) or len(frames) > 500:
                break
        response.close()
        assert frames[-1]["depth"]["ready"] == 1
        assert all(f["object"] == "hermes.queue" for f in frames)
        assert frames[-1]["in_flight"]["limit"] == 5


async def test_queue_lists_ready_runs_in_order_and_the_failures_it_counts(
    settings: Settings, redis: aioredis.Redis, keys: Keys
) -> None:
    async with running_api(settings) as api:
        for i in range(3):
            assert (await api.post("/v1/runs", json={"input": f"waits {i}"})).status == 202
        # The order workers take them in (queued time, then id for runs of the same ms).
        ids = [run_id.decode() for run_id in await redis.zrange(keys.queue, 0, -1)]
        body = await (await api.get("/v1/queue?limit=2")).json()
        queued = body["queued"]
        assert (queued["total"], queued["limit"], queued["offset"]) == (3, 2, 0)
        assert [(r["run_id"], r["position"]) for r in queued["data"]] == [(ids[0], 1), (ids[1], 2)]
        first = queued["data"][0]
        assert first["session_id"] == ids[0] and first["attempt"] == 0
        assert 0 <= first["age_seconds"] < 60 and first["queued_at"] >= first["created_at"] - 1
        rest = (await (await api.get("/v1/queue?limit=2&offset=2")).json())["queued"]["data"]
        assert [(r["run_id"], r["position"]) for r in rest] == [(ids[2], 3)]
        assert body["recent_failures"]["total"] == 0 and body["recent_failures"]["data"] == []

        async with running_worker(settings):
            failing = await api.post("/v1/runs", json={"input": "[fail] listed"})
            failed_id = (await failing.json())["run_id"]

            async def failures() -> dict[str, Any]:
                return (await (await api.get("/v1/queue")).json())["recent_failures"]

            listed = await eventually(failures, lambda f: f["total"] == 1 and f["data"])
        [failure] = listed["data"]
        assert failure["run_id"] == failed_id and failure["session_id"] == failed_id
        assert (failure["error"], failure["reason"]) == (
            "echo backend failure requested",
            "agent_error",
        )
        assert failure["failed_at"] > time.time() - 60
