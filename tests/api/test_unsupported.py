"""Upstream endpoints we do not provide: a clear 501, behind auth, never claimed by discovery."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from hermes_queue.api.app import create_app
from hermes_queue.api.ops.discovery import ENDPOINT_NAMES, routed_endpoints
from hermes_queue.api.ops.unsupported import (
    UNSUPPORTED,
    Unsupported,
    is_not_implemented,
    placeholders,
)
from hermes_queue.config import Settings

# Upstream features that must stay false whatever placeholder routes exist (skills_api: while
# no worker published a catalog).
FALSE_FEATURES = ("admin_config_rw", "skills_api")
NOT_LISTED = {
    "model_options",
    "browser_control_register",
    "browser_control_ws",
    "artifact_upload",
    "artifact_download",
}


def concrete(path: str) -> str:
    """A request path for a route template: each ``{placeholder}`` filled in."""
    return re.sub(r"\{[^}]+\}", "0123456789ab", path)


def ids(endpoint: Unsupported) -> str:
    return f"{endpoint.method} {endpoint.path}"


async def send(api: TestClient, endpoint: Unsupported, **kwargs: Any) -> Any:
    body = {} if endpoint.method in ("POST", "PATCH") else None
    return await api.request(endpoint.method, concrete(endpoint.path), json=body, **kwargs)


@pytest.mark.parametrize("endpoint", UNSUPPORTED, ids=ids)
async def test_answers_501_envelope(api: TestClient, endpoint: Unsupported) -> None:
    response = await send(api, endpoint)
    assert response.status == 501
    assert response.content_type == "application/json"
    error = (await response.json())["error"]
    assert error["code"] == "not_implemented"
    assert error["type"] == "server_error" and error["param"] is None
    # The message names the endpoint and says where to read more.
    assert f"{endpoint.method} {endpoint.path}" in error["message"]
    assert "docs/compatibility.md" in error["message"]


@pytest.mark.parametrize("endpoint", UNSUPPORTED, ids=ids)
async def test_needs_the_key(api: TestClient, endpoint: Unsupported) -> None:
    response = await send(api, endpoint, headers={"Authorization": "Bearer wrong"})
    assert response.status == 401
    assert (await response.json())["error"]["code"] == "gateway_auth_failed"


async def test_capabilities_ignore_the_placeholders(api: TestClient) -> None:
    body = await (await api.get("/v1/capabilities")).json()
    endpoints, features = body["endpoints"], body["features"]
    assert NOT_LISTED.isdisjoint(endpoints)
    listed_paths = {(e["method"], e["path"]) for e in endpoints.values()}
    assert listed_paths.isdisjoint({(e.method, e.path) for e in UNSUPPORTED})
    assert all(features[name] is False for name in FALSE_FEATURES)
    # The real lists (tests/api/test_catalog.py) are listed; with no published catalog
    # skills_api is false.
    assert endpoints["skills"] == {"method": "GET", "path": "/v1/skills"}
    assert endpoints["toolsets"] == {"method": "GET", "path": "/v1/toolsets"}


def test_placeholders_whose_path_has_an_upstream_name_are_still_skipped(
    settings: Settings,
) -> None:
    """The marker, not the absence of a name, keeps them out: some of them do have names."""
    named = [e for e in UNSUPPORTED if (e.method, e.path) in ENDPOINT_NAMES]
    assert {ENDPOINT_NAMES[(e.method, e.path)] for e in named} == NOT_LISTED
    app = create_app(settings)
    handlers = {
        (route.method, route.resource.canonical): route.handler
        for route in app.router.routes()
        if route.resource is not None
    }
    assert all(is_not_implemented(handlers[(e.method, e.path)]) for e in UNSUPPORTED)
    assert NOT_LISTED.isdisjoint(routed_endpoints(app))


def test_a_real_route_wins_over_its_placeholder() -> None:
    """Implementing an endpoint later needs no change here: its placeholder is not added."""

    async def options(request: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application()
    served = [web.get("/api/model/options", options)]
    app.add_routes([*served, *placeholders(served)])
    routes = [
        r
        for r in app.router.routes()
        if r.method == "GET"
        and r.resource is not None
        and r.resource.canonical == "/api/model/options"
    ]
    assert [r.handler for r in routes] == [options]
    assert routed_endpoints(app)["model_options"] == {
        "method": "GET",
        "path": "/api/model/options",
    }
