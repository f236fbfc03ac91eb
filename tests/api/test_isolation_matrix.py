"""The isolation matrix, driven by ``/openapi.json`` (issue 34; docs/tenants.md).

Every operation of the document whose path takes an id is enumerated from the document itself.
Tenant ``alpha`` creates one object of each kind; tenant ``beta``'s key on each operation with
alpha's id must answer exactly what it answers for an id that does not exist (status 404 and the
same body, the id aside), and alpha's objects must be untouched afterwards. An id-taking
operation the matrix cannot build an object for fails the test: a new route with an id must
come with its ownership (and a row in ``KINDS``). Listings: beta's exclude alpha's objects, and
alpha's are the same before and after beta's activity. SQLite and PostgreSQL both.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from hermes_queue.config import Settings
from tests.support.inprocess import running_api
from tests.support.tenants import ALPHA, BETA, bearer, with_tenants

A, B = bearer(ALPHA), bearer(BETA)


@pytest.fixture
async def api(store_settings: Settings) -> AsyncIterator[TestClient]:
    async with running_api(with_tenants(store_settings)) as client:
        yield client


async def _json(api: TestClient, method: str, path: str, body: Any = None) -> dict[str, Any]:
    response = await api.request(method, path, json=body, headers=A)
    assert response.status in (200, 201, 202), (path, response.status, await response.text())
    return dict(await response.json())


async def new_run(api: TestClient) -> str:
    return str((await _json(api, "POST", "/v1/runs", {"input": "hello"}))["run_id"])


async def new_session(api: TestClient) -> str:
    body = {"title": f"alpha {uuid.uuid4().hex[:6]}"}
    return str((await _json(api, "POST", "/api/sessions", body))["session"]["id"])


async def new_response(api: TestClient) -> str:
    body = {"input": "hello", "background": True}
    return str((await _json(api, "POST", "/v1/responses", body))["id"])


async def new_job(api: TestClient) -> str:
    body = {"name": "nightly", "prompt": "report", "schedule": "every 1h"}
    return str((await _json(api, "POST", "/api/jobs", body))["job"]["id"])


@dataclass(frozen=True)
class Kind:
    """One kind of object an id names: how alpha makes one, an id of that shape that does not
    exist, and where alpha reads it back (to show beta changed nothing)."""

    create: Callable[[TestClient], Awaitable[str]]
    unknown: str
    read: str


KINDS: dict[str, Kind] = {
    "run_id": Kind(new_run, "run_0123456789abcdef0123456789abcdef", "/v1/runs/{id}"),
    "session_id": Kind(new_session, "api_1700000000_0badf00d", "/api/sessions/{id}"),
    "response_id": Kind(
        new_response, "resp_0123456789abcdef0123456789abcdef", "/v1/responses/{id}"
    ),
    "job_id": Kind(new_job, "0123456789ab", "/api/jobs/{id}"),
}
# Bodies that pass validation, so a refusal is about the id, not the body.
BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/v1/runs/{run_id}/approval"): {"choice": "once"},
    ("POST", "/v1/runs/{run_id}/steer"): {"text": "left instead"},
    ("PATCH", "/api/sessions/{session_id}"): {"title": "beta was here"},
    ("POST", "/api/sessions/{session_id}/fork"): {},
    ("POST", "/api/sessions/{session_id}/model"): {"model": "hermes-agent"},
    ("POST", "/api/sessions/{session_id}/chat"): {"message": "hi"},
    ("POST", "/api/sessions/{session_id}/chat/stream"): {"message": "hi"},
    ("PATCH", "/api/jobs/{job_id}"): {"name": "beta was here"},
}
HEADERS: dict[tuple[str, str], dict[str, str]] = {
    ("GET", "/v1/runs/{run_id}/events"): {"Last-Event-ID": "0-0"},  # a stream's resume
    ("GET", "/api/sessions/{session_id}/chat/stream"): {"Last-Event-ID": "0-0"},
}
# Listings of tenant data: every GET of the runs, sessions and jobs tags without an id.
LISTINGS = {"/api/sessions", "/api/jobs"}


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    params: tuple[str, ...]
    operator_only: bool
    not_provided: bool


def operations(doc: dict[str, Any]) -> list[Operation]:
    found = []
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            found.append(
                Operation(
                    method.upper(),
                    path,
                    tuple(re.findall(r"{(\w+)}", path)),
                    bool(op.get("x-operator-only")),
                    "not provided" in op.get("tags", []),
                )
            )
    return found


def unbuildable(ops: list[Operation]) -> list[str]:
    """The tenant-data operations taking an id no row of ``KINDS`` makes."""
    return [
        f"{op.method} {op.path}"
        for op in ops
        if op.params
        and not op.operator_only
        and not op.not_provided
        and set(op.params) - set(KINDS)
    ]


def test_a_new_id_taking_route_without_a_kind_fails_the_matrix() -> None:
    doc = {
        "paths": {
            "/v1/runs/{run_id}": {"get": {"tags": ["runs"]}},
            "/v1/widgets/{widget_id}": {"delete": {"tags": ["widgets"]}},
            "/v1/queue/{x}": {"get": {"tags": ["operations"], "x-operator-only": True}},
        }
    }
    assert unbuildable(operations(doc)) == ["DELETE /v1/widgets/{widget_id}"]


async def test_another_tenants_ids_are_not_found_on_every_operation(api: TestClient) -> None:
    doc = await (await api.get("/openapi.json")).json()
    ops = operations(doc)
    with_ids = [op for op in ops if op.params]
    assert len(with_ids) >= 25, "the document lost its id-taking operations"
    missing = unbuildable(ops)
    assert not missing, (
        f"id-taking operations the matrix cannot build an object for: {missing} "
        "(give each its ownership, then a row in KINDS)"
    )

    objects = {name: await kind.create(api) for name, kind in KINDS.items()}
    before = {
        name: await _json(api, "GET", KINDS[name].read.format(id=oid))
        for name, oid in objects.items()
    }
    checked = []
    for op in with_ids:
        owned = op.path
        unknown = op.path
        for param in op.params:
            if param in KINDS:
                owned = owned.replace(f"{{{param}}}", objects[param])
                unknown = unknown.replace(f"{{{param}}}", KINDS[param].unknown)
            else:
                owned = unknown = owned.replace(f"{{{param}}}", "x")
        body = BODIES.get((op.method, op.path))
        headers = {**B, **HEADERS.get((op.method, op.path), {})}
        theirs = await api.request(op.method, owned, json=body, headers=headers)
        if op.not_provided:  # upstream's endpoints this server does not have: no object
            assert theirs.status == 501, op
            continue
        if op.operator_only:  # the operator's alone, whatever the id (test_tenant_auth.py)
            assert theirs.status == 403, op
            continue
        missing = await api.request(op.method, unknown, json=body, headers=headers)
        assert theirs.status == missing.status == 404, (op, theirs.status, missing.status)
        shown, expected = await theirs.text(), await missing.text()
        for param in op.params:
            shown = shown.replace(objects[param], "<id>")
            expected = expected.replace(KINDS[param].unknown, "<id>")
        assert shown == expected, op
        checked.append(f"{op.method} {op.path}")

    # Beta changed nothing: each object reads the same to alpha (a run may have moved on).
    for name, oid in objects.items():
        after = await _json(api, "GET", KINDS[name].read.format(id=oid))
        if name == "run_id":
            assert after["status"] in ("queued", "running", "completed"), after
        elif name == "response_id":
            assert after["id"] == before[name]["id"]
        else:
            assert after == before[name], name
    # The matrix reached every kind through several operations.
    for name in KINDS:
        assert sum(f"{{{name}}}" in op for op in checked) >= 1, name
    assert len(checked) >= 20, checked


async def test_listings_are_ones_own_and_unmoved_by_others(api: TestClient) -> None:
    doc = await (await api.get("/openapi.json")).json()
    tenant_lists = {
        op.path
        for op in operations(doc)
        if op.method == "GET"
        and not op.params
        and set(doc["paths"][op.path]["get"]["tags"]) & {"runs", "sessions", "jobs"}
    }
    assert tenant_lists == LISTINGS, "a new listing of tenant data needs a row here"

    alpha_session, alpha_job = await new_session(api), await new_job(api)
    alpha_before = {path: await _json(api, "GET", path) for path in sorted(LISTINGS)}
    # Beta's own activity: a session, a job, a run.
    for path, body in (
        ("/api/sessions", {"title": "beta's"}),
        ("/api/jobs", {"name": "b", "prompt": "p", "schedule": "every 1h"}),
        ("/v1/runs", {"input": "hi"}),
    ):
        assert (await api.post(path, json=body, headers=B)).status in (201, 202, 200)
    alpha_after = {path: await _json(api, "GET", path) for path in sorted(LISTINGS)}
    assert alpha_after == alpha_before
    sessions = await (await api.get("/api/sessions", headers=B)).json()
    jobs = await (await api.get("/api/jobs", headers=B)).json()
    # Beta's session and its job's session; none of alpha's.
    titles = sorted(s["title"] for s in sessions["data"])
    assert len(titles) == 2 and titles[1] == "beta's" and titles[0].endswith(": b"), titles
    assert alpha_session not in {s["id"] for s in sessions["data"]}
    assert [j["name"] for j in jobs["jobs"]] == ["b"] and alpha_job not in str(jobs)
