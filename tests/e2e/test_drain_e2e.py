"""Drain of a real API process: after SIGTERM, new runs get 503 gateway_draining (or, once the
listener closes, a refused connection) — never a 500 — while reads keep working."""

from __future__ import annotations

import asyncio
import signal
import time

import aiohttp

from hermes_queue.config import Settings
from tests.support.processes import Cluster

GRACE = 1.5


async def test_sigterm_drains_before_closing(cluster: Cluster, settings: Settings) -> None:
    url = await cluster.start_api(drain_grace_seconds=GRACE)
    api = cluster.procs[-1]
    headers = {"Authorization": f"Bearer {settings.api.api_key}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(f"{url}/v1/runs", json={"input": "before"}) as response:
            run_id = (await response.json())["run_id"]
        api.process.send_signal(signal.SIGTERM)
        await api.wait_for_log("draining")
        draining, refused, reads = 0, 0, 0
        deadline = time.monotonic() + GRACE + 10
        while time.monotonic() < deadline and api.process.poll() is None:
            try:
                async with http.post(f"{url}/v1/runs", json={"input": "during"}) as response:
                    assert response.status == 503, await response.text()
                    assert response.headers["Retry-After"] == "1"
                    assert (await response.json())["error"]["code"] == "gateway_draining"
                    draining += 1
                async with http.get(f"{url}/v1/runs/{run_id}") as response:
                    assert response.status == 200
                    reads += 1
            except aiohttp.ClientConnectionError:
                refused += 1
            await asyncio.sleep(0.05)
        assert api.process.wait(10) == 0
    assert draining > 0 and reads > 0
    # Only the run created before the drain exists.
    found = cluster.redis().scan_iter(match=f"{settings.redis.namespace}:run:*", count=500)
    assert sum(1 for key in found if not key.endswith(b":events")) == 1
