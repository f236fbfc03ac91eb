"""Rows carry their tenant, on SQLite and PostgreSQL alike (migration 5; docs/tenants.md):
listings filter on it, titles and conversation names are per tenant, a fork stays in its
source's tenant, and a turn never writes into another tenant's transcript."""

from __future__ import annotations

import pytest

from hermes_queue.store import SessionNotFound, SessionStore, TitleConflict
from hermes_queue.store.responses import ResponseRow
from tests.store.conftest import StoreFactory, old_session


def user(text: str) -> dict[str, object]:
    return {"role": "user", "content": text}


async def test_rows_from_before_tenants_are_the_default_tenants(
    store_factory: StoreFactory,
) -> None:
    old = store_factory()
    assert await old.migrate(target=4) == [1, 2, 3, 4]
    await old_session(old, "before", title="Old")
    new = store_factory()
    assert await new.migrate() == [5]
    row = await new.get_session("before")
    assert row is not None and row.tenant == "default"
    assert [r.id for r in await new.list_sessions(tenant="default")] == ["before"]
    assert await new.list_sessions(tenant="alpha") == []


async def test_listings_and_titles_are_per_tenant(store: SessionStore) -> None:
    await store.create_session("a1", title="Plan", tenant="alpha")
    await store.create_session("b1", title="Plan", tenant="beta")  # same title, other tenant
    await store.create_session("d1")
    with pytest.raises(TitleConflict):
        await store.create_session("a2", title="Plan", tenant="alpha")
    assert [r.id for r in await store.list_sessions(tenant="alpha")] == ["a1"]
    assert [r.id for r in await store.list_sessions(tenant="beta")] == ["b1"]
    assert {r.id for r in await store.list_sessions()} == {"a1", "b1", "d1"}
    assert await store.title_holder("Plan", "beta") == "b1"
    assert await store.title_holder("Plan") is None
    assert await store.next_title_in_lineage("Plan", "alpha") == "Plan #2"


async def test_a_fork_is_its_sources_tenants(store: SessionStore) -> None:
    await store.create_session("a1", title="Plan", tenant="alpha")
    await store.create_session("b1", title="Plan #2", tenant="beta")
    child = await store.fork_session("a1", "a1-fork")
    # Titled in its own tenant's lineage ("Plan #2" is beta's, not alpha's).
    assert child.tenant == "alpha" and child.title == "Plan #2"


async def test_a_turn_never_writes_into_another_tenants_session(store: SessionStore) -> None:
    await store.create_session("shared-name", tenant="alpha")
    with pytest.raises(SessionNotFound):
        await store.append_messages(
            "shared-name", [user("hi")], turn_key="r1:user", create_source="x", tenant="beta"
        )
    with pytest.raises(SessionNotFound):
        await store.start_turn("shared-name", user("hi"), turn_key="r2:user", tenant="beta")
    assert await store.get_messages("shared-name") == []
    # Created on first use as the writer's tenant's.
    await store.append_messages(
        "fresh", [user("hi")], turn_key="r3:user", create_source="api_server", tenant="beta"
    )
    fresh = await store.get_session("fresh")
    assert fresh is not None and fresh.tenant == "beta"
    assert await store.append_messages("fresh", [user("again")], tenant="beta") == 1


async def test_responses_and_conversation_names_are_per_tenant(store: SessionStore) -> None:
    for tenant, rid in (("alpha", "resp_a"), ("beta", "resp_b")):
        await store.put_response(
            ResponseRow(id=rid, session_id="s", status="completed", response={}, tenant=tenant)
        )
        await store.set_conversation_head("chat", rid, tenant)
    row = await store.get_response("resp_a")
    assert row is not None and row.tenant == "alpha"
    assert await store.conversation_head("chat", "alpha") == "resp_a"
    assert await store.conversation_head("chat", "beta") == "resp_b"
    assert await store.conversation_head("chat") is None
