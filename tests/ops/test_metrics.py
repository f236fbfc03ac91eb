"""Prometheus metrics of the API and of workers, scraped over HTTP, moving with real runs."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient

from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from tests.ops.conftest import Samples, scrape_api, scrape_port, value
from tests.support.inprocess import running_api, running_worker
from tests.support.polling import eventually

API_NAMES = {
    "hermes_queue_queue_depth",
    "hermes_queue_queue_oldest_ready_age_seconds",
    "hermes_queue_workers",
    "hermes_queue_worker_slots",
    "hermes_queue_worker_free_slots",
    "hermes_queue_desired_workers",
    "hermes_queue_sse_clients",
    "hermes_queue_redis_up",
    "hermes_queue_runs_total",
    "hermes_queue_backpressure_rejections_total",
}
WORKER_NAMES = {
    "hermes_queue_runs_total",
    "hermes_queue_pickup_latency_seconds_count",
    "hermes_queue_time_to_first_event_seconds_count",
    "hermes_queue_run_duration_seconds_count",
    "hermes_queue_worker_active_runs",
}


def names(samples: Samples) -> set[str]:
    return {name for name, _labels in samples}


def depth(samples: Samples, state: str) -> float | None:
    return value(samples, "hermes_queue_queue_depth", state=state)


def no_ids_in_labels(samples: Samples) -> bool:
    return not any(
        "run_" in label_value or "sess" in label_value
        for _name, labels in samples
        for _key, label_value in labels
    )


async def start(api: TestClient, text: str) -> str:
    response = await api.post("/v1/runs", json={"input": text})
    assert response.status == 202, await response.text()
    return str((await response.json())["run_id"])


async def test_api_metrics_need_the_key_unless_public(settings: Settings) -> None:
    async with running_api(settings) as api:
        assert (await api.get("/metrics", headers={"Authorization": ""})).status == 401
        samples = await scrape_api(api)
        assert API_NAMES <= names(samples)
        assert value(samples, "hermes_queue_redis_up") == 1
        assert all(name.startswith("hermes_queue_") for name in names(samples))
    async with running_api(settings.replace(metrics_public=True)) as api:
        response = await api.get("/metrics", headers={"Authorization": ""})
        assert response.status == 200
        # Only /metrics is opened, nothing else.
        assert (await api.get("/v1/queue", headers={"Authorization": ""})).status == 401


async def test_metrics_follow_runs_queued_started_and_finished(ops_settings: Settings) -> None:
    settings = ops_settings
    async with running_api(settings) as api:
        # No worker: runs wait ready.
        first, second = await start(api, "one"), await start(api, "two")
        samples = await scrape_api(api)
        assert depth(samples, "ready") == 2
        assert depth(samples, "running") == 0
        assert value(samples, "hermes_queue_desired_workers") == 1
        assert value(samples, "hermes_queue_workers") == 0
        # A queued run stopped by the API is counted by the API process.
        doomed = await start(api, "never runs")
        assert (await api.post(f"/v1/runs/{doomed}/stop")).status == 200
        samples = await scrape_api(api)
        assert value(samples, "hermes_queue_runs_total", outcome="cancelled") == 1
        assert depth(samples, "ready") == 2

        async with running_worker(settings) as worker:
            port = settings.metrics.port
            done = await eventually(
                lambda: scrape_port(port),
                lambda s: value(s, "hermes_queue_runs_total", outcome="completed") == 2,
                what="two completed runs counted by the worker",
            )
            assert WORKER_NAMES <= names(done)
            assert value(done, "hermes_queue_pickup_latency_seconds_count") == 2
            assert value(done, "hermes_queue_time_to_first_event_seconds_count") == 2
            assert value(done, "hermes_queue_run_duration_seconds_count", outcome="completed") == 2
            assert no_ids_in_labels(done)
            for run_id in (first, second):
                assert (await (await api.get(f"/v1/runs/{run_id}")).json())["status"] == (
                    "completed"
                )

            slow = await start(api, "take your time [slow:30]")
            busy = await eventually(
                lambda: scrape_api(api),
                lambda s: depth(s, "running") == 1,
                what="the slow run running",
            )
            assert depth(busy, "ready") == 0
            assert value(busy, "hermes_queue_workers") == 1
            slots = settings.worker.concurrency
            assert value(busy, "hermes_queue_worker_slots") == slots
            await eventually(
                lambda: scrape_api(api),
                lambda s: value(s, "hermes_queue_worker_free_slots") == slots - 1,
                what="one busy slot reported by the heartbeat",
            )
            assert value(await scrape_port(port), "hermes_queue_worker_active_runs") == 1
            assert no_ids_in_labels(busy)

            assert (await api.post(f"/v1/runs/{slow}/stop")).status == 200
            ended = await eventually(
                lambda: scrape_port(port),
                lambda s: value(s, "hermes_queue_runs_total", outcome="cancelled") == 1,
                what="the stopped run counted cancelled by the worker",
            )
            assert value(ended, "hermes_queue_run_duration_seconds_count", outcome="cancelled") == 1
            assert worker.metrics is not None
            after = await eventually(
                lambda: scrape_api(api),
                lambda s: depth(s, "running") == 0,
                what="nothing running",
            )
            assert value(after, "hermes_queue_desired_workers") == 0


async def test_depth_split_with_deferred_and_session_blocked_runs(
    ops_settings: Settings, redis: aioredis.Redis, keys: Keys
) -> None:
    async with running_api(ops_settings) as api, running_worker(ops_settings):
        assert (await api.post("/api/sessions", json={"id": "ops-1"})).status == 201
        active = await api.post(
            "/api/sessions/ops-1/chat/stream", json={"message": "long one [slow:30]"}
        )
        assert active.status == 200
        active_run = active.headers["X-Hermes-Run-Id"]
        # Left open (its client still reads it, as far as the API can tell): a turn nobody
        # reads would not block the next one (tests/api/test_abandoned_turns.py).
        await eventually(
            lambda: scrape_api(api), lambda s: depth(s, "running") == 1, what="active running"
        )
        waiting = await api.post(
            "/api/sessions/ops-1/chat/stream",
            json={"message": "after it", "multitask_strategy": "enqueue"},
        )
        assert waiting.status == 200
        waiting_run = waiting.headers["X-Hermes-Run-Id"]
        waiting.close()
        # A job scheduled an hour from now: in the queue, but not ready.
        await redis.zadd(keys.queue, {"run_deferred": int((time.time() + 3600) * 1000)})

        samples = await scrape_api(api)
        assert {s: depth(samples, s) for s in ("ready", "deferred", "running", "blocked")} == {
            "ready": 0,
            "deferred": 1,
            "running": 1,
            "blocked": 1,
        }
        assert value(samples, "hermes_queue_queue_oldest_ready_age_seconds") == 0
        body = await (await api.get("/v1/queue")).json()
        assert body["depth"] == {"ready": 0, "deferred": 1, "running": 1, "blocked": 1}
        assert [run["run_id"] for run in body["in_flight"]["data"]] == [active_run]

        # The active turn ends: the blocked one is promoted and runs to completion.
        assert (await api.post(f"/v1/runs/{active_run}/stop")).status == 200
        active.close()

        async def status() -> Any:
            return (await (await api.get(f"/v1/runs/{waiting_run}")).json())["status"]

        await eventually(status, lambda s: s == "completed", what="promoted run completed")
        samples = await scrape_api(api)
        assert depth(samples, "blocked") == 0
        assert depth(samples, "running") == 0
        assert await redis.zcard(keys.blocked) == 0


async def test_a_failing_metric_observer_never_breaks_a_run(ops_settings: Settings) -> None:
    """STYLE lesson 11: observers are side effects; the run completes, the failure is counted."""
    async with running_api(ops_settings) as api, running_worker(ops_settings) as worker:
        assert worker.metrics is not None

        def broken(_seconds: float, _exemplar: Any = None) -> None:
            raise RuntimeError("observer down")

        worker.metrics.pickup_latency_seconds.observe = broken  # type: ignore[method-assign]
        worker.metrics.time_to_first_event_seconds.observe = broken  # type: ignore[method-assign]
        run_id = await start(api, "still fine [tool:search]")

        async def status() -> Any:
            return (await (await api.get(f"/v1/runs/{run_id}")).json())["status"]

        await eventually(status, lambda s: s == "completed", what="run completed")
        samples = await scrape_port(ops_settings.metrics.port)
        errors = "hermes_queue_observer_errors_total"
        assert value(samples, errors, observer="pickup_latency") == 1
        assert value(samples, errors, observer="time_to_first_event") == 1
        assert value(samples, "hermes_queue_runs_total", outcome="completed") == 1


async def test_a_worker_whose_metrics_port_is_taken_serves_on_the_next_and_says_where(
    ops_settings: Settings,
) -> None:
    """Several workers on one host: the second takes the next port of the range, and the
    queue snapshot (JSON API, CLI) tells operators which port is whose."""
    base = ops_settings.metrics.port
    with socket.socket() as taken:
        taken.bind((ops_settings.metrics.host, base))
        taken.listen()
        async with running_api(ops_settings) as api, running_worker(ops_settings):

            async def snapshot() -> Any:
                return await (await api.get("/v1/queue")).json()

            queue = await eventually(
                snapshot,
                lambda q: (
                    [w.get("metrics_port") for w in q["workers"]["data"]] != [None]
                    and q["workers"]["count"] == 1
                ),
                what="the worker's metrics port in the registry",
            )
            port = queue["workers"]["data"][0]["metrics_port"]
            assert base < port < base + ops_settings.metrics.port_span
            # This worker's own endpoint (its gauges; the histograms appear with the first run).
            assert "hermes_queue_worker_active_runs" in names(await scrape_port(port))


def test_no_free_port_in_the_range_is_logged_not_fatal(
    ops_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    from hermes_queue.metrics.processes import WorkerMetrics

    base = ops_settings.metrics.port
    with socket.socket() as taken:
        taken.bind((ops_settings.metrics.host, base))
        taken.listen()
        metrics = WorkerMetrics()
        try:
            assert metrics.serve(ops_settings.metrics.host, base, span=1) is None
        finally:
            metrics.close()
    assert f"no free port on {ops_settings.metrics.host} in {base}-{base}" in caplog.text
