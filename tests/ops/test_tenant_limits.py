"""Per-tenant limits at admission (``tenant_max_ready``, ``tenant_max_rate``) and the queue
per tenant on the operator's views (``/v1/queue``, ``/metrics``), against a real Redis: the
limited tenant gets 429 with a Retry-After of its own, another tenant is unaffected."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient

from hermes_queue.config import ConfigError, Settings
from hermes_queue.keys import Keys
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from tests.ops.conftest import scrape_api, value
from tests.support.inprocess import running_api

ALPHA = "alpha-3c5e7a9b1d3f5a7c9e1b"
BETA = "beta-8f6d4b2a0c9e7f5d3b1a"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def post_run(api: TestClient, key: str) -> Any:
    return await api.post("/v1/runs", json={"input": "hi"}, headers=bearer(key))


def limited(settings: Settings, **limits: str) -> Settings:
    return settings.replace(api_keys=f"alpha={ALPHA},beta={BETA}", **limits).validate()


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[TestClient]:
    async with running_api(limited(settings, tenant_max_ready="alpha=2")) as client:
        yield client


async def test_a_tenant_at_its_ready_limit_gets_429_and_another_does_not(
    api: TestClient, redis: aioredis.Redis, keys: Keys
) -> None:
    for _ in range(2):
        assert (await post_run(api, ALPHA)).status == 202
    refused = await post_run(api, ALPHA)
    assert refused.status == 429
    error = (await refused.json())["error"]
    assert (error["code"], error["type"]) == ("queue_full", "rate_limit_error")
    assert "2, at most 2" in error["message"]
    # Nothing of alpha's drained: the longest wait.
    assert refused.headers["Retry-After"] == "60"
    for _ in range(4):  # beta, and the operator's tenant, have no limit
        assert (await post_run(api, BETA)).status == 202
    assert (await api.post("/v1/runs", json={"input": "op"})).status == 202
    assert await redis.zcard(keys.queue) == 7
    # The Retry-After is alpha's own drain: 60 claims of alpha's in the window (a few minutes)
    # clear one run in a few seconds, whatever the whole queue drains (a million claims).
    stats = keys.stats(int(time.time() // 60))
    await redis.hset(stats, mapping={"claimed": 1_000_000, "claimed:alpha": 60})
    again = await post_run(api, ALPHA)
    assert again.status == 429
    assert 2 <= int(again.headers["Retry-After"]) <= 6


async def test_the_queue_per_tenant_on_the_operators_views(
    api: TestClient, redis: aioredis.Redis, keys: Keys, settings: Settings
) -> None:
    for _ in range(3):
        await post_run(api, ALPHA)  # two queued, one refused
    assert (await post_run(api, BETA)).status == 202
    # A run of a tenant no longer configured (its key removed since): "other" in the metrics.
    repo = RunRepository(redis, keys, settings.runs)
    assert await repo.create(NewRun(new_run_id(), "s", TurnRequest("x"), tenant="ghost"))
    body = await (await api.get("/v1/queue")).json()
    tenants = {t["tenant"]: t for t in body["tenants"]["data"]}
    assert [t["tenant"] for t in body["tenants"]["data"]] == ["default", "alpha", "beta", "ghost"]
    assert (tenants["alpha"]["ready"], tenants["alpha"]["refused"]) == (2, 1)
    assert (tenants["beta"]["ready"], tenants["beta"]["refused"]) == (1, 0)
    assert tenants["default"]["ready"] == 0 and tenants["ghost"]["ready"] == 1
    assert tenants["alpha"]["limits"] == {"running": 0, "ready": 2, "rate_per_second": 0.0}
    assert tenants["beta"]["limits"] == {"running": 0, "ready": 0, "rate_per_second": 0.0}
    samples = await scrape_api(api)
    depth = "hermes_queue_tenant_queue_depth"
    assert value(samples, depth, tenant="alpha", state="ready") == 2
    assert value(samples, depth, tenant="other", state="ready") == 1
    assert value(samples, depth, tenant="ghost", state="ready") is None
    # The totals autoscalers read are unchanged in shape.
    assert value(samples, "hermes_queue_queue_depth", state="ready") == 4
    rejections = "hermes_queue_tenant_rejections_total"
    assert value(samples, rejections, tenant="alpha", reason="tenant_ready") == 1
    # Not a full queue: the queue's own rejection counter stays for its own limits.
    assert value(samples, "hermes_queue_backpressure_rejections_total", reason="depth") == 0


async def test_a_creation_rate_per_tenant(settings: Settings) -> None:
    async with running_api(limited(settings, tenant_max_rate="alpha=1/m")) as api:
        assert (await post_run(api, ALPHA)).status == 202
        refused = await post_run(api, ALPHA)  # within the minute: its bucket is empty
        assert refused.status == 429
        assert (await refused.json())["error"]["code"] == "rate_limited"
        assert 50 <= int(refused.headers["Retry-After"]) <= 60
        for _ in range(3):
            assert (await post_run(api, BETA)).status == 202


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("tenant_max_ready", "alpha", "no '='"),
        ("tenant_max_ready", "alpha=-1", "is not a whole number"),
        ("tenant_max_ready", "Alpha=3", "tenant name"),
        ("tenant_max_ready", "a=1,a=2", "named twice"),
        ("tenant_max_rate", "alpha=5/h", "per second (5 or 5/s) or per minute"),
        ("tenant_max_running", "default=4", "not limited in running turns"),
    ],
)
def test_bad_limits_stop_the_start(settings: Settings, name: str, text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=name) as raised:
        settings.replace(**{name: text}).validate()
    assert says in str(raised.value)


async def test_each_tenants_mean_wait_on_the_operators_views(
    api: TestClient, redis: aioredis.Redis, keys: Keys, settings: Settings
) -> None:
    """The runs workers took, by tenant: alpha's waited 6 s and 2 s (their queue entries put
    back in time), beta's and the operator's were taken at once; a tenant with none taken has
    no mean wait."""
    repo = RunRepository(redis, keys, settings.runs)
    runs: dict[str, list[str]] = {"alpha": [], "beta": [], "default": []}
    for tenant, count in (("alpha", 2), ("beta", 1), ("default", 1)):
        for _ in range(count):
            run_id = new_run_id()
            assert await repo.create(NewRun(run_id, run_id, TurnRequest("x"), tenant=tenant))
            runs[tenant].append(run_id)
    now_ms = int(time.time() * 1000)
    for run_id, waited_s in zip(runs["alpha"], (6, 2), strict=True):
        await redis.zadd(keys.queue, {run_id: now_ms - waited_s * 1000}, xx=True)
    for run_id in [r for ids in runs.values() for r in ids]:
        assert await repo.claim(run_id, "w1") is not None
    body = await (await api.get("/v1/queue")).json()
    waits = {t["tenant"]: t["mean_wait_seconds"] for t in body["tenants"]["data"]}
    assert 4 <= waits["alpha"] < 5  # (6 + 2) / 2, plus the test's own few ms
    assert 0 <= waits["beta"] < 1 and 0 <= waits["default"] < 1
    samples = await scrape_api(api)
    assert 4 <= value(samples, "hermes_queue_tenant_wait_seconds", tenant="alpha") < 5
    # Nothing of theirs taken: no mean wait (null in JSON, no sample in the metrics).
    await repo.create(NewRun(new_run_id(), "s2", TurnRequest("x"), tenant="gamma"))
    body = await (await api.get("/v1/queue")).json()
    gamma = next(t for t in body["tenants"]["data"] if t["tenant"] == "gamma")
    assert gamma["ready"] == 1 and gamma["mean_wait_seconds"] is None
    samples = await scrape_api(api)  # gamma is not configured: "other", with nothing taken
    assert value(samples, "hermes_queue_tenant_wait_seconds", tenant="other") is None
