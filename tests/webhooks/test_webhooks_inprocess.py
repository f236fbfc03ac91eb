"""Webhooks with the API and a worker in this process (real Redis, a real receiver): admission
of the ``webhook`` field, deployment subscriptions by event type, a refused target."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient

from hermes_queue.config import Settings
from hermes_queue.config.webhook_config import Subscription
from hermes_queue.keys import Keys
from tests.support.inprocess import running_api, running_worker
from tests.support.polling import eventually
from tests.support.webhook_receiver import Receiver


@pytest.fixture
async def api(hook_settings: Settings) -> AsyncIterator[TestClient]:
    async with running_api(hook_settings) as client:
        yield client


async def _status(api: TestClient, run_id: str) -> dict[str, Any]:
    response = await api.get(f"/v1/runs/{run_id}")
    return dict(await response.json())


async def _ended(api: TestClient, run_id: str) -> dict[str, Any]:
    return await eventually(
        lambda: _status(api, run_id),
        lambda s: s["status"] in ("completed", "failed", "cancelled"),
        what=f"{run_id} ended",
    )


@pytest.mark.parametrize(
    "webhook",
    [
        "not a url",
        "ftp://example.com/x",
        "/relative/path",
        "http://",
        "https://example.com/a b",
        "https://example.com/" + "x" * 2100,
        42,
        ["https://example.com"],
    ],
)
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/runs", {"input": "hi"}),
        ("/v1/responses", {"input": "hi"}),
        ("/api/sessions/s1/chat", {"message": "hi"}),
    ],
)
async def test_a_malformed_webhook_is_refused_at_admission(
    api: TestClient, path: str, body: dict[str, Any], webhook: Any
) -> None:
    if path.startswith("/api/sessions"):
        await api.post("/api/sessions", json={"id": "s1"})
    response = await api.post(path, json={**body, "webhook": webhook})
    assert response.status == 400
    error = (await response.json())["error"]
    assert error["code"] == "invalid_webhook" and error["param"] == "webhook"


async def test_responses_and_session_chat_take_a_webhook(
    hook_settings: Settings, api: TestClient, receiver: Receiver
) -> None:
    async with running_worker(hook_settings):
        await api.post("/api/sessions", json={"id": "s2"})
        chat = await api.post(
            "/api/sessions/s2/chat", json={"message": "hi", "webhook": receiver.url}
        )
        response = await api.post(
            "/v1/responses",
            json={"input": "hi", "background": True, "webhook": receiver.url},
        )
        assert chat.status == 200 and response.status == 200
        chat_run = chat.headers["X-Hermes-Run-Id"]
        response_run = response.headers["X-Hermes-Run-Id"]
        for run_id in (chat_run, response_run):
            await _ended(api, run_id)
            await eventually(
                lambda run_id=run_id: _status(api, run_id),
                lambda s: s["webhook"]["state"] == "delivered",
                what="delivered",
            )
    assert {r.body["run_id"] for r in receiver.received} == {chat_run, response_run}
    assert all(r.verified for r in receiver.received)


async def test_subscriptions_get_the_event_types_they_name(
    hook_settings: Settings, receiver: Receiver, redis: aioredis.Redis, keys: Keys
) -> None:
    subscribed = hook_settings.replace(
        webhook_subscriptions={
            "failures": Subscription("failures", receiver.url + "/failures", ("run.failed",)),
            "approvals": Subscription(
                "approvals", receiver.url + "/approvals", ("approval.requested",)
            ),
        },
        approval_timeout_seconds=0.5,
    )
    async with running_api(subscribed) as api, running_worker(subscribed):
        ok = await (await api.post("/v1/runs", json={"input": "fine"})).json()
        bad = await (await api.post("/v1/runs", json={"input": "x [fail]"})).json()
        asks = await (await api.post("/v1/runs", json={"input": "[approve]"})).json()
        for run in (ok, bad, asks):
            await _ended(api, run["run_id"])
        await eventually(lambda: len(receiver.received) >= 2, what="two deliveries")

        async def listed() -> list[dict[str, Any]]:
            answer = await api.get("/v1/webhooks/deliveries")
            return list((await answer.json())["data"])

        # Every run event was expanded and every delivery settled: nothing else is coming.
        await eventually(
            lambda: redis.zcard(keys.webhook_outbox_at(0)), lambda n: n == 0, what="outbox empty"
        )
        made = await listed()
    assert len(made) == 2 and all(d["state"] == "delivered" for d in made)
    by_path = {r.path: r for r in receiver.received}
    assert sorted(by_path) == ["/hooks/approvals", "/hooks/failures"]
    assert by_path["/hooks/failures"].body["run_id"] == bad["run_id"]
    assert by_path["/hooks/failures"].body["type"] == "run.failed"
    approval = by_path["/hooks/approvals"].body
    assert approval["type"] == "approval.requested" and approval["run_id"] == asks["run_id"]
    assert approval["approval"]["request_id"]
    assert all(r.verified for r in receiver.received) and len(receiver.received) == 2


async def test_a_refused_target_is_a_dead_letter_never_connected(
    hook_settings: Settings, api: TestClient
) -> None:
    connections: list[object] = []

    async def on_connect(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer.get_extra_info("peername"))
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.2", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with running_worker(hook_settings):
            created = await api.post(
                "/v1/runs",
                json={"input": "hi", "webhook": f"http://127.0.0.2:{port}/hook"},
            )
            run_id = (await created.json())["run_id"]
            status = await eventually(
                lambda: _status(api, run_id),
                lambda s: s.get("webhook", {}).get("state") == "dead",
                what="a dead letter",
            )
        listed = await (await api.get("/v1/webhooks/deliveries?state=dead")).json()
    finally:
        server.close()
        await server.wait_closed()
    # The run's client is told it was refused; which address and why is the operator's.
    assert status["webhook"]["last_error"].startswith("target refused: its address is not")
    assert status["webhook"]["attempt_count"] == 1  # refused: not retried
    assert connections == []
    assert [d["id"] for d in listed["data"]] == [status["webhook"]["id"]]
    (attempt,) = listed["data"][0]["attempts"]
    assert attempt["outcome"] == "refused" and "127.0.0.2 (loopback)" in attempt["error"]
