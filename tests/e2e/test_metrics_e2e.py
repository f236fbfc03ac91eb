"""Metrics scraped from real API and worker processes as a run goes through them."""

from __future__ import annotations

from typing import Any

import aiohttp

from tests.ops.conftest import parse, scrape_port, value
from tests.support.ports import unclaimed_port
from tests.support.processes import Cluster


async def scrape_api(url: str, key: str) -> Any:
    headers = {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics", headers=headers) as r:
        assert r.status == 200
        return parse(await r.text())


async def test_api_and_worker_processes_export_what_happened(
    cluster: Cluster, client_for: Any
) -> None:
    url = await cluster.start_api()
    key = cluster.settings.api.api_key
    async with client_for(url) as client:
        waiting = await client.create_run("queued first")
        before = await scrape_api(url, key)
        assert value(before, "hermes_queue_queue_depth", state="ready") == 1
        assert value(before, "hermes_queue_workers") == 0

        port = unclaimed_port()
        await cluster.start_worker(metrics_port=port)
        events = [p async for _, p in client.iter_events(waiting)]
        assert events[-1]["event"] == "run.completed"

    worker = await scrape_port(port)
    assert value(worker, "hermes_queue_runs_total", outcome="completed") == 1
    assert value(worker, "hermes_queue_pickup_latency_seconds_count") == 1
    after = await scrape_api(url, key)
    assert value(after, "hermes_queue_queue_depth", state="ready") == 0
    assert value(after, "hermes_queue_workers") == 1
