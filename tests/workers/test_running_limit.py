"""A tenant's running limit under a worker with many slots: no more than N of its runs run at
once while its others wait, and another tenant's runs take the free slots meanwhile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient

from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from tests.support.inprocess import running_api, running_worker
from tests.support.polling import eventually

ALPHA = "alpha-2b4d6f8a0c2e4a6c8e0b"
BETA = "beta-1a3c5e7b9d1f3a5c7e9d"


async def start(api: TestClient, key: str, text: str) -> str:
    response = await api.post(
        "/v1/runs", json={"input": text}, headers={"Authorization": f"Bearer {key}"}
    )
    assert response.status == 202, await response.text()
    return str((await response.json())["run_id"])


async def statuses(redis: aioredis.Redis, keys: Keys, runs: list[str]) -> list[str]:
    return [(await redis.hget(keys.run(r), "status") or b"").decode() for r in runs]


async def test_no_more_than_the_limit_runs_while_another_tenant_runs(
    settings: Settings, redis: aioredis.Redis, keys: Keys, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    local = settings.replace(
        api_keys=f"alpha={ALPHA},beta={BETA}", tenant_max_running="alpha=2", worker_concurrency=8
    ).validate()
    async with running_api(local) as api, running_worker(local):
        alpha = [await start(api, ALPHA, f"a{i} [gate:{gate}]") for i in range(6)]
        beta = [await start(api, BETA, f"b{i} [gate:{gate}]") for i in range(3)]

        async def both() -> tuple[list[str], list[str]]:
            return await statuses(redis, keys, alpha), await statuses(redis, keys, beta)

        def settled(found: tuple[list[str], list[str]]) -> bool:
            return found[0].count("running") == 2 and found[1].count("running") == 3

        # Held at 2 while 3 of the worker's 8 slots stay free: alpha's others wait queued,
        # and beta's, queued after all of alpha's, run.
        a_now, _ = await eventually(both, settled, within=20, what="2 of alpha's and beta's 3")
        assert a_now.count("queued") == 4
        queue = await (await api.get("/v1/queue")).json()
        figures = {t["tenant"]: t for t in queue["tenants"]["data"]}
        assert (figures["alpha"]["running"], figures["alpha"]["ready"]) == (2, 4)
        assert figures["alpha"]["held"] == 4 and figures["beta"]["running"] == 3
        gate.touch()

        def done(found: tuple[list[str], list[str]]) -> bool:
            return all(s == "completed" for s in found[0] + found[1])

        await eventually(both, done, within=30, what="every run completed")
    # Never more than two of alpha's at once, over the whole drain (from the records' times).
    spans = []
    for run_id in alpha:
        record: dict[bytes, Any] = await redis.hgetall(keys.run(run_id))
        spans.append((float(record[b"started_at"]), float(record[b"finished_at"])))
    edges = sorted([(s, 1) for s, _ in spans] + [(f, -1) for _, f in spans])
    running, most = 0, 0
    for _at, step in edges:
        running += step
        most = max(most, running)
    assert most <= 2
    assert await redis.hget(keys.fair_at(0), "r:alpha") is None
