"""Keys bound to tenants at the edge: which key reaches what (docs/tenants.md).

The operator's key alone reaches the operator surfaces (the rows marked ``operator``); a
tenant's key there answers 403 ``operator_only``. ``/p/<tenant>/`` selects the tenant: a
tenant's key only its own (else 401), the operator's any configured one (else 404)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient

from hermes_queue.api.routes import SERVED
from hermes_queue.config import Settings
from tests.support.inprocess import running_api

ALPHA = "alpha-9d2e4f6a8b0c1d3e5f7a"
ALPHA_ROTATED = "alpha-rotated-71c3e5a9b2d4f6e8"
BETA = "beta-5e7a9c1b3d5f7a9c1e3b"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[TestClient]:
    tenants = settings.replace(api_keys=f"alpha={ALPHA},alpha={ALPHA_ROTATED},beta={BETA}")
    async with running_api(tenants.validate()) as client:
        yield client


OPERATOR_PATHS = sorted({row.path for row in SERVED if row.operator and "{" not in row.path})


def test_the_operator_surfaces_are_marked() -> None:
    assert {"/v1/queue", "/v1/queue/stream", "/metrics", "/health/detailed"} <= set(OPERATOR_PATHS)
    marked = {row.path for row in SERVED if row.operator}
    assert "/v1/webhooks/deliveries/{delivery_id}" in marked


async def test_a_tenant_key_on_an_operator_surface_is_403(
    api: TestClient, settings: Settings
) -> None:
    for path in OPERATOR_PATHS:
        if path == "/v1/queue/stream":
            continue  # a stream: its 403 is checked below, before it would open
        for key in (ALPHA, BETA):
            response = await api.get(path, headers=bearer(key))
            assert response.status == 403, path
            body = await response.json()
            assert body["error"]["code"] == "operator_only", path
        response = await api.get(path, headers=bearer(settings.api.api_key))
        assert response.status == 200, path
    assert (await api.get("/v1/queue/stream", headers=bearer(ALPHA))).status == 403
    redeliver = "/v1/webhooks/deliveries/run_x:1/redeliver"
    assert (await api.post(redeliver, headers=bearer(ALPHA))).status == 403


async def test_tenant_keys_reach_the_tenant_api(api: TestClient) -> None:
    for key in (ALPHA, ALPHA_ROTATED, BETA):
        assert (await api.get("/v1/models", headers=bearer(key))).status == 200
    response = await api.get("/v1/models", headers=bearer("alpha-9d2e4f6a8b0c1d3e5f7b"))
    assert response.status == 401
    assert (await response.json())["error"]["code"] == "gateway_auth_failed"


async def test_a_profile_prefix_selects_a_tenant_its_key_is_for(
    api: TestClient, settings: Settings
) -> None:
    assert (await api.get("/p/alpha/v1/models", headers=bearer(ALPHA))).status == 200
    # Another tenant's profile: the key is not valid there (upstream's per-profile keys).
    response = await api.get("/p/beta/v1/models", headers=bearer(ALPHA))
    assert response.status == 401
    # The operator may act as any configured tenant; an unknown one is not found.
    operator = bearer(settings.api.api_key)
    assert (await api.get("/p/beta/v1/models", headers=operator)).status == 200
    assert (await api.get("/p/default/v1/models", headers=operator)).status == 200
    assert (await api.get("/p/nobody/v1/models", headers=operator)).status == 404
    # Operator surfaces stay the operator's under a prefix too.
    assert (await api.get("/p/alpha/v1/queue", headers=bearer(ALPHA))).status == 403
    assert (await api.get("/p/alpha/v1/queue", headers=operator)).status == 200
    # Public paths stay public.
    assert (await api.get("/p/alpha/health", headers={"Authorization": ""})).status == 200


async def test_the_document_marks_the_operator_surfaces(api: TestClient) -> None:
    doc = await (await api.get("/openapi.json")).json()
    queue = doc["paths"]["/v1/queue"]["get"]
    assert queue["x-operator-only"] is True and "403" in queue["responses"]
    assert "x-operator-only" not in doc["paths"]["/v1/runs"]["post"]
