"""Runs belong to the tenant that started them: the record carries it, another tenant's key
finds nothing (the 404 of an unknown id), and Idempotency-Keys are per tenant."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient

from hermes_queue.config import Settings
from tests.support.inprocess import running_api
from tests.support.tenants import ALPHA, BETA, bearer, with_tenants


@pytest.fixture
def tenant_settings(settings: Settings) -> Settings:
    return with_tenants(settings)


@pytest.fixture
async def api(tenant_settings: Settings) -> AsyncIterator[TestClient]:
    async with running_api(tenant_settings) as client:
        yield client


async def start(api: TestClient, key: str, **headers: str) -> str:
    response = await api.post(
        "/v1/runs", json={"input": "hello"}, headers={**bearer(key), **headers}
    )
    assert response.status == 202, await response.text()
    return str((await response.json())["run_id"])


async def test_the_record_carries_the_tenant(
    api: TestClient, redis: aioredis.Redis, tenant_settings: Settings
) -> None:
    keys = tenant_settings.redis.keys
    alpha_run = await start(api, ALPHA)
    operator_run = await start(api, tenant_settings.api.api_key)
    assert await redis.hget(keys.run(alpha_run), "tenant") == b"alpha"
    assert await redis.hget(keys.run(operator_run), "tenant") == b"default"


async def test_another_tenants_run_is_not_found(api: TestClient, tenant_settings: Settings) -> None:
    run_id = await start(api, ALPHA)
    assert (await api.get(f"/v1/runs/{run_id}", headers=bearer(ALPHA))).status == 200
    mine = await api.get(f"/v1/runs/{run_id}", headers=bearer(BETA))
    unknown = await api.get("/v1/runs/run_0123456789abcdef", headers=bearer(BETA))
    assert mine.status == unknown.status == 404
    # The same body, but for the id it names.
    assert (await mine.text()).replace(run_id, "ID") == (await unknown.text()).replace(
        "run_0123456789abcdef", "ID"
    )
    # The operator sees it only by acting as its tenant.
    operator = bearer(tenant_settings.api.api_key)
    assert (await api.get(f"/v1/runs/{run_id}", headers=operator)).status == 404
    assert (await api.get(f"/p/alpha/v1/runs/{run_id}", headers=operator)).status == 200
    assert (await api.post(f"/v1/runs/{run_id}/stop", headers=bearer(BETA))).status == 404


async def test_the_same_idempotency_key_is_two_tenants_two_runs(api: TestClient) -> None:
    alpha_run = await start(api, ALPHA, **{"Idempotency-Key": "order-42"})
    beta_run = await start(api, BETA, **{"Idempotency-Key": "order-42"})
    assert alpha_run != beta_run
    assert await start(api, ALPHA, **{"Idempotency-Key": "order-42"}) == alpha_run
    assert await start(api, BETA, **{"Idempotency-Key": "order-42"}) == beta_run
