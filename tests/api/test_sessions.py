"""Session resources over HTTP, on both session stores."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from hermes_queue.config import Settings
from hermes_queue.store import create_store


async def create(api: TestClient, **body: Any) -> dict[str, Any]:
    response = await api.post("/api/sessions", json=body)
    assert response.status == 201, await response.text()
    payload = await response.json()
    assert payload["object"] == "hermes.session"
    return dict(payload["session"])


async def error_code(response: Any) -> str:
    return str((await response.json())["error"]["code"])


async def test_create_get_and_projection_hides_prompt(session_api: TestClient) -> None:
    made = await create(session_api, id="s-1", title="First", model="m1", system_prompt="secret")
    got = await (await session_api.get("/api/sessions/s-1")).json()
    assert got["session"] == made
    assert made["id"] == "s-1" and made["title"] == "First" and made["model"] == "m1"
    assert made["has_system_prompt"] is True
    assert "system_prompt" not in made and "model_config" not in made
    generated = await create(session_api)
    assert generated["id"].startswith("api_")


async def test_create_errors(session_api: TestClient) -> None:
    await create(session_api, id="dup", title="Taken")
    cases = [
        ({"id": "dup"}, 409, "session_exists"),
        ({"id": "x/../y"}, 400, "invalid_session_id"),
        ({"id": "a" * 300}, 400, "invalid_session_id"),
        ({"id": "other", "title": "Taken"}, 400, "invalid_title"),
        ({"id": "other2", "title": 5}, 400, "invalid_title"),
        ({"id": "other3", "system_prompt": ["x"]}, 400, "invalid_system_prompt"),
    ]
    for body, status, code in cases:
        response = await session_api.post("/api/sessions", json=body)
        assert response.status == status, body
        assert await error_code(response) == code
    assert (await session_api.get("/api/sessions/other")).status == 404


async def test_a_taken_title_names_its_holder_in_upstreams_words(session_api: TestClient) -> None:
    await create(session_api, id="holder", title="Taken")
    await create(session_api, id="renamed")
    cases = [
        (
            "POST",
            "/api/sessions",
            {"id": "n1", "title": "Taken"},
            "Title already in use by session holder",
        ),
        (
            "PATCH",
            "/api/sessions/renamed",
            {"title": "Taken"},
            "Title 'Taken' is already in use by session holder",
        ),
        (
            "POST",
            "/api/sessions/renamed/fork",
            {"id": "f1", "title": "Taken"},
            "Title 'Taken' is already in use by session holder",
        ),
    ]
    for method, path, body, message in cases:
        response = await session_api.request(method, path, json=body)
        assert response.status == 400
        error = (await response.json())["error"]
        assert (error["code"], error["message"]) == ("invalid_title", message)
    unsupported = await session_api.patch("/api/sessions/renamed", json={"pinned": True})
    assert (await unsupported.json())["error"]["message"] == "Unsupported session fields: pinned"


async def test_concurrent_creates_with_one_id_give_one_201(session_api: TestClient) -> None:
    responses = await asyncio.gather(
        *(session_api.post("/api/sessions", json={"id": "race"}) for _ in range(8))
    )
    assert sorted(r.status for r in responses) == [201] + [409] * 7


async def test_list_pagination_and_has_more(session_api: TestClient) -> None:
    for index in range(5):
        await create(session_api, id=f"p{index}")
    first = await (await session_api.get("/api/sessions", params={"limit": "2"})).json()
    assert first["object"] == "list" and first["limit"] == 2 and first["has_more"] is True
    assert len(first["data"]) == 2
    last = await (
        await session_api.get("/api/sessions", params={"limit": "2", "offset": "4"})
    ).json()
    assert len(last["data"]) == 1 and last["has_more"] is False
    seen = {
        row["id"]
        for page in (0, 2, 4)
        for row in (
            await (
                await session_api.get("/api/sessions", params={"limit": "2", "offset": str(page)})
            ).json()
        )["data"]
    }
    assert seen == {f"p{i}" for i in range(5)}
    bad = await session_api.get("/api/sessions", params={"limit": "ten"})
    assert bad.status == 400 and await error_code(bad) == "invalid_pagination"


async def test_patch_title_and_end_reason(session_api: TestClient) -> None:
    await create(session_api, id="s-p", title="Old")
    response = await session_api.patch("/api/sessions/s-p", json={"title": "New"})
    assert (await response.json())["session"]["title"] == "New"
    cleared = await session_api.patch("/api/sessions/s-p", json={"title": ""})
    assert (await cleared.json())["session"].get("title") is None
    ended = await session_api.patch("/api/sessions/s-p", json={"end_reason": "user_closed"})
    body = (await ended.json())["session"]
    assert body["end_reason"] == "user_closed" and body["ended_at"]
    bad = await session_api.patch("/api/sessions/s-p", json={"model": "x"})
    assert bad.status == 400 and await error_code(bad) == "unsupported_session_field"
    missing = await session_api.patch("/api/sessions/nope", json={"title": "x"})
    assert missing.status == 404 and await error_code(missing) == "session_not_found"


async def test_delete(session_api: TestClient) -> None:
    await create(session_api, id="s-d")
    response = await session_api.delete("/api/sessions/s-d")
    assert await response.json() == {
        "object": "hermes.session.deleted",
        "id": "s-d",
        "deleted": True,
    }
    assert (await session_api.get("/api/sessions/s-d")).status == 404
    assert (await session_api.delete("/api/sessions/s-d")).status == 404


async def test_fork_copies_messages_and_ends_source(
    session_api: TestClient, store_settings: Settings
) -> None:
    await create(session_api, id="src", title="T1")
    store = create_store(store_settings.store.url, schema=store_settings.store.schema or None)
    try:
        await store.append_messages(
            "src", [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
        )
    finally:
        await store.close()
    response = await session_api.post("/api/sessions/src/fork", json={"id": "child"})
    assert response.status == 201
    child = (await response.json())["session"]
    assert child["parent_session_id"] == "src" and child["title"] == "T1 #2"
    source = (await (await session_api.get("/api/sessions/src")).json())["session"]
    assert source["end_reason"] == "branched"
    for session_id in ("src", "child"):
        page = await (await session_api.get(f"/api/sessions/{session_id}/messages")).json()
        assert page["session_id"] == session_id
        assert [m["content"] for m in page["data"]] == ["hi", "yo"]
    again = await session_api.post("/api/sessions/src/fork", json={"id": "child"})
    assert again.status == 409


async def test_messages_follow_the_compression_tip(
    session_api: TestClient, store_settings: Settings
) -> None:
    store = create_store(store_settings.store.url, schema=store_settings.store.schema or None)
    await create(session_api, id="root")
    try:
        await store.append_messages("root", [{"role": "user", "content": "old"}])
        await store.end_session("root", "compression")
        await store.create_session("tip-session", parent_session_id="root")
        await store.append_messages("tip-session", [{"role": "user", "content": "summary"}])
    finally:
        await store.close()
    page = await (await session_api.get("/api/sessions/root/messages")).json()
    assert page["session_id"] == "tip-session"
    assert [m["content"] for m in page["data"]] == ["summary"]


async def test_a_turn_on_a_compressed_session_runs_on_its_tip(
    session_api: TestClient, session_worker: Any, store_settings: Settings
) -> None:
    store = create_store(store_settings.store.url, schema=store_settings.store.schema or None)
    await create(session_api, id="root2")
    chat = "/api/sessions/root2/chat"
    try:
        first = await session_api.post(chat, json={"message": "before"})
        assert (await first.json())["session_id"] == "root2"  # not compressed: itself
        await store.end_session("root2", "compression")
        await store.create_session("tip2", parent_session_id="root2")
    finally:
        await store.close()
    response = await session_api.post(chat, json={"message": "after"})
    assert response.status == 200, await response.text()
    assert (await response.json())["session_id"] == "tip2"
    page = await (await session_api.get("/api/sessions/tip2/messages?order=oldest")).json()
    assert [m["content"] for m in page["data"]] == ["after", "Echo: after"]


async def test_store_outage_is_503(settings: Settings) -> None:
    from tests.support.inprocess import running_api

    broken = settings.replace(
        store_url="postgresql://nobody@127.0.0.1:1/none", migrate_on_start=False
    )
    async with running_api(broken) as api:
        response = await api.get("/api/sessions")
        assert response.status == 503
        assert await error_code(response) == "session_db_unavailable"


@pytest.mark.parametrize("path", ["/api/sessions/nope", "/api/sessions/nope/messages"])
async def test_unknown_session_is_404(session_api: TestClient, path: str) -> None:
    response = await session_api.get(path)
    assert response.status == 404 and await error_code(response) == "session_not_found"
