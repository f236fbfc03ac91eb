"""The session-store contract, run against SQLite and PostgreSQL alike (see conftest.py).

Everything here is behaviour a client of the API would notice: ids, titles, listings and
pagination, transcripts and their counters, forks, compression-tip following, and what the
projections refuse to reveal.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from hermes_queue.store import (
    InvalidTitle,
    SessionExists,
    SessionNotFound,
    SessionRow,
    SessionStore,
    StoreUnavailable,
    TitleConflict,
    TurnUsage,
    create_store,
    project_message,
    project_session,
)
from hermes_queue.store.migrations import LATEST_VERSION
from hermes_queue.store.responses import ResponseRow
from tests.store.conftest import StoreFactory, old_session, postgres_url


def user(text: object, **extra: object) -> dict[str, object]:
    return {"role": "user", "content": text, **extra}


def assistant(text: object, **extra: object) -> dict[str, object]:
    return {"role": "assistant", "content": text, **extra}


# -- migrations --------------------------------------------------------------------------------


async def test_fresh_database_migrates_once(store_factory: StoreFactory) -> None:
    store = store_factory()
    assert await store.schema_version() == 0
    assert await store.migrate() == list(range(1, LATEST_VERSION + 1))
    assert await store.schema_version() == LATEST_VERSION
    assert await store.migrate() == []
    assert (await store.create_session("s1")).id == "s1"


async def test_database_at_version_1_upgrades_to_latest(store_factory: StoreFactory) -> None:
    old = store_factory()
    assert await old.migrate(target=1) == [1]
    assert await old.schema_version() == 1
    await old_session(old, "kept", title="Before upgrade")

    new = store_factory()
    assert await new.migrate() == list(range(2, LATEST_VERSION + 1))
    assert await new.schema_version() == LATEST_VERSION
    kept = await new.get_session("kept")
    assert kept is not None and kept.title == "Before upgrade"
    # Version 2 brought idempotent appends.
    assert await new.append_messages("kept", [user("hi")], turn_key="t1") == 1
    assert await new.append_messages("kept", [user("hi")], turn_key="t1") == 0


async def test_concurrent_migrations_apply_each_version_once(store_factory: StoreFactory) -> None:
    results = await asyncio.gather(*(store_factory().migrate() for _ in range(3)))
    assert sorted(v for applied in results for v in applied) == list(range(1, LATEST_VERSION + 1))


# -- create / get ------------------------------------------------------------------------------


async def test_create_and_get_session(store: SessionStore) -> None:
    before = time.time()
    created = await store.create_session(
        "s1",
        model="m1",
        model_config={"k": "v"},
        system_prompt="secret prompt",
        title="  My   first\tsession ",
        user_id="u1",
    )
    assert created.source == "api_server"
    assert created.title == "My first session"
    assert before <= created.started_at <= time.time()
    assert (created.ended_at, created.end_reason, created.message_count) == (None, None, 0)
    assert await store.get_session("s1") == created
    assert await store.get_session("missing") is None


async def test_concurrent_creates_with_one_id_admit_exactly_one(
    store_factory: StoreFactory,
) -> None:
    first = store_factory()
    await first.migrate()
    stores = [first, store_factory(), store_factory(), first]
    results = await asyncio.gather(
        *(s.create_session("race", title=f"title {i}") for i, s in enumerate(stores)),
        return_exceptions=True,
    )
    winners = [r for r in results if isinstance(r, SessionRow)]
    assert len(winners) == 1
    assert all(isinstance(r, SessionExists) for r in results if r not in winners)
    stored = await first.get_session("race")
    assert stored is not None and stored.title == winners[0].title


async def test_title_conflict_inserts_nothing(store: SessionStore) -> None:
    await store.create_session("a", title="Shared")
    with pytest.raises(TitleConflict):
        await store.create_session("b", title="Shared")
    assert await store.get_session("b") is None
    # Untitled sessions never conflict.
    await store.create_session("c")
    await store.create_session("d", title="   ")
    assert (await store.get_session("d")).title is None  # type: ignore[union-attr]


async def test_existing_id_wins_over_title_conflict(store: SessionStore) -> None:
    await store.create_session("a", title="Shared")
    with pytest.raises(SessionExists):
        await store.create_session("a", title="Shared")


async def test_overlong_title_is_invalid(store: SessionStore) -> None:
    with pytest.raises(InvalidTitle):
        await store.create_session("a", title="x" * 101)
    assert await store.get_session("a") is None


# -- projections -------------------------------------------------------------------------------


async def test_session_projection_hides_prompt_and_model_config(store: SessionStore) -> None:
    row = await store.create_session(
        "s1", system_prompt="do not leak", model_config={"provider": "secret-route"}
    )
    public = project_session(row)
    assert public["has_system_prompt"] is True
    assert public["has_model_config"] is True
    for hidden in ("system_prompt", "model_config", "session_key", "archived"):
        assert hidden not in public
    assert "do not leak" not in repr(public) and "secret-route" not in repr(public)
    # Only list rows carry last_active and preview.
    assert "last_active" not in public and "preview" not in public
    listed = project_session((await store.list_sessions())[0])
    assert listed["preview"] == "" and listed["last_active"] == row.started_at

    bare = project_session(await store.create_session("s2"))
    assert bare["has_system_prompt"] is False and bare["has_model_config"] is False


def test_projections_omit_missing_keys_and_unknown_fields() -> None:
    public = project_session({"id": "x", "title": None, "system_prompt": "p", "secret": 1})
    assert public == {
        "id": "x",
        "title": None,
        "has_system_prompt": True,
        "has_model_config": False,
    }
    msg = project_message({"id": 1, "role": "user", "content": "hi", "turn_key": "k"})
    assert msg == {"id": 1, "role": "user", "content": "hi"}


async def test_message_projection_lists_only_public_fields(store: SessionStore) -> None:
    await store.create_session("s1")
    await store.append_messages("s1", [user("hi")], turn_key="turn-1")
    (msg,) = await store.get_messages("s1")
    assert msg.turn_key == "turn-1"
    assert set(project_message(msg)) == {
        "id",
        "session_id",
        "role",
        "content",
        "tool_call_id",
        "tool_calls",
        "tool_name",
        "timestamp",
        "token_count",
        "finish_reason",
        "reasoning",
        "reasoning_content",
    }


async def test_start_turn_sees_the_history_without_its_own_writes(store: SessionStore) -> None:
    """A turn's start is one operation: its history (what earlier turns wrote, not what an
    earlier attempt of this turn wrote) and its user message, recorded once per turn."""
    await store.create_session("s")
    await store.append_messages("s", [user("q1")], turn_key="run_a:user")
    await store.append_messages("s", [assistant("a1")], turn_key="run_a:reply")

    for _attempt in range(2):  # a retried attempt sees the same history, writes nothing twice
        history = await store.start_turn(
            "s", user("q2"), turn_key="run_b:user", history_excluding="run_b:"
        )
        assert [(m["role"], m["content"]) for m in history or []] == [
            ("user", "q1"),
            ("assistant", "a1"),
        ]
    assert [m.content for m in await store.get_messages("s")] == ["q1", "a1", "q2"]
    row = await store.get_session("s")
    assert row is not None and row.message_count == 3

    # No history asked for (the client sent it); the session is created with the message.
    assert (
        await store.start_turn("new", user("hi"), turn_key="run_c:user", create_source="x") is None
    )
    created = await store.get_session("new")
    assert created is not None and created.source == "x" and created.message_count == 1
    with pytest.raises(SessionNotFound):
        await store.start_turn("missing", user("hi"), turn_key="run_d:user")


# -- listing -----------------------------------------------------------------------------------


async def test_list_orders_by_last_activity_and_paginates(store: SessionStore) -> None:
    for sid in ("a", "b", "c", "d"):
        await store.create_session(sid)
    now = time.time()
    # "a" is the oldest session but has the newest message.
    await store.append_messages("a", [user("late", timestamp=now + 100)])
    await store.append_messages("c", [user("early", timestamp=now + 50)])

    ids = [r.id for r in await store.list_sessions()]
    assert ids == ["a", "c", "d", "b"]
    rows = await store.list_sessions()
    assert rows[0].last_active == now + 100
    assert rows[2].last_active == rows[2].started_at  # no messages: started_at

    page1 = await store.list_sessions(limit=2, offset=0)
    page2 = await store.list_sessions(limit=2, offset=2)
    page3 = await store.list_sessions(limit=2, offset=4)
    assert [r.id for r in page1 + page2] == ids
    assert len(page2) == 2 and page3 == []  # a full page is the API's has_more signal


async def test_list_filters_source_and_children(store: SessionStore) -> None:
    await store.create_session("root")
    await store.create_session("cli-root", source="cli")
    await store.create_session("child", parent_session_id="root")
    assert {r.id for r in await store.list_sessions()} == {"root", "cli-root"}
    assert {r.id for r in await store.list_sessions(include_children=True)} == {
        "root",
        "cli-root",
        "child",
    }
    assert [r.id for r in await store.list_sessions(source="cli")] == ["cli-root"]


async def test_list_preview_is_first_user_message_truncated(store: SessionStore) -> None:
    await store.create_session("long")
    await store.append_messages(
        "long",
        [
            {"role": "system", "content": "system text"},
            user("line one\nline two " + "x" * 80),
            user("second user message"),
        ],
    )
    await store.create_session("parts")
    await store.append_messages(
        "parts",
        [
            user(
                [
                    {"type": "text", "text": "look at"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                ]
            )
        ],
    )
    previews = {r.id: r.preview for r in await store.list_sessions()}
    assert previews["long"] == ("line one line two " + "x" * 80)[:60] + "..."
    assert previews["parts"] == "look at"


# -- update / end / delete ---------------------------------------------------------------------


async def test_update_title_set_clear_and_conflict(store: SessionStore) -> None:
    await store.create_session("a", title="Taken")
    await store.create_session("b")
    assert (await store.update_session("b", title="New")).title == "New"
    assert (await store.update_session("b", title="New")).title == "New"  # own title: no clash
    with pytest.raises(TitleConflict):
        await store.update_session("b", title="Taken")
    assert (await store.get_session("b")).title == "New"  # type: ignore[union-attr]
    assert (await store.update_session("b", title="")).title is None
    assert (await store.update_session("a", title=None)).title is None
    with pytest.raises(SessionNotFound):
        await store.update_session("missing", title="x")


async def test_first_end_reason_wins(store: SessionStore) -> None:
    await store.create_session("a")
    ended = await store.update_session("a", end_reason="user_closed")
    assert ended.end_reason == "user_closed" and ended.ended_at is not None
    again = await store.update_session("a", end_reason="other")
    assert (again.end_reason, again.ended_at) == ("user_closed", ended.ended_at)
    assert await store.end_session("a", "third") is False
    await store.create_session("b")
    assert await store.end_session("b", "done") is True
    assert await store.end_session("missing", "done") is False


async def test_delete_removes_session_and_messages(store: SessionStore) -> None:
    await store.create_session("a")
    await store.append_messages("a", [user("hi"), assistant("hello")])
    await store.create_session("child", parent_session_id="a")
    assert await store.delete_session("a") is True
    assert await store.get_session("a") is None
    assert await store.get_messages("a") == []
    assert await store.delete_session("a") is False
    # The orphaned child becomes a root, so it stays reachable in listings.
    assert [r.id for r in await store.list_sessions()] == ["child"]
    # A deleted id can be reused.
    assert (await store.create_session("a")).message_count == 0


# -- messages ----------------------------------------------------------------------------------


async def test_append_keeps_counters_and_round_trips_fields(store: SessionStore) -> None:
    await store.create_session("s")
    parts = [
        {"type": "text", "text": "hi"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
    ]
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
    ]
    inserted = await store.append_messages(
        "s",
        [
            user(parts, timestamp=1000.5),
            assistant(
                None,
                tool_calls=calls,
                finish_reason="tool_calls",
                reasoning="think",
                reasoning_content="rc",
                token_count=7,
            ),
            {"role": "tool", "content": '{"ok": true}', "tool_call_id": "c1", "tool_name": "f"},
        ],
    )
    assert inserted == 3
    row = await store.get_session("s")
    assert row is not None and (row.message_count, row.tool_call_count) == (3, 2)

    first, second, third = await store.get_messages("s")
    assert first.content == parts and first.timestamp == 1000.5
    assert second.content is None and second.tool_calls == calls
    assert (
        second.finish_reason,
        second.reasoning,
        second.reasoning_content,
        second.token_count,
    ) == ("tool_calls", "think", "rc", 7)
    # A string that happens to be JSON stays a string.
    assert third.content == '{"ok": true}' and third.tool_name == "f"
    assert first.id < second.id < third.id


async def test_nul_characters_read_back_the_same_on_every_backend(store: SessionStore) -> None:
    await store.create_session("s")
    await store.append_messages("s", [{"role": "tool", "content": "a\x00b", "tool_name": "t"}])
    assert (await store.get_messages("s"))[0].content == "a\ufffdb"


async def test_append_to_unknown_session_fails(store: SessionStore) -> None:
    with pytest.raises(SessionNotFound):
        await store.append_messages("missing", [user("hi")])


async def test_turn_key_makes_append_idempotent(store: SessionStore) -> None:
    await store.create_session("s")
    await store.create_session("other")
    turn = [user("q"), assistant("a")]
    assert await store.append_messages("s", turn, turn_key="run-1:turn") == 2
    assert await store.append_messages("s", turn, turn_key="run-1:turn") == 0  # retried attempt
    assert await store.append_messages("other", turn, turn_key="run-1:turn") == 2  # per session
    assert await store.append_messages("s", [user("next")], turn_key="run-2:turn") == 1
    assert [m.content for m in await store.get_messages("s")] == ["q", "a", "next"]
    assert (await store.get_session("s")).message_count == 3  # type: ignore[union-attr]


async def test_concurrent_retries_of_one_turn_insert_once(store_factory: StoreFactory) -> None:
    first = store_factory()
    await first.migrate()
    await first.create_session("s")
    stores = [first, store_factory(), store_factory()]
    counts = await asyncio.gather(
        *(s.append_messages("s", [user("q"), assistant("a")], turn_key="k") for s in stores)
    )
    assert sorted(counts) == [0, 0, 2]
    assert len(await first.get_messages("s")) == 2


async def test_get_messages_pages_in_chronological_order(store: SessionStore) -> None:
    await store.create_session("s")
    await store.append_messages("s", [user(f"m{i}") for i in range(10)])

    async def contents(**kwargs: object) -> list[str]:
        return [m.content for m in await store.get_messages("s", **kwargs)]  # type: ignore[arg-type]

    assert await contents() == [f"m{i}" for i in range(10)]
    assert await contents(limit=3) == ["m0", "m1", "m2"]
    assert await contents(limit=3, offset=8) == ["m8", "m9"]
    assert await contents(limit=3, order="latest") == ["m7", "m8", "m9"]
    assert await contents(limit=3, offset=3, order="latest") == ["m4", "m5", "m6"]
    assert await contents(order="latest") == [f"m{i}" for i in range(10)]
    assert await store.get_messages("missing") == []
    with pytest.raises(ValueError):
        await store.get_messages("s", order="newest")  # type: ignore[arg-type]


async def test_conversation_is_agent_history(store: SessionStore) -> None:
    await store.create_session("s")
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    parts = [{"type": "text", "text": "see"}]
    await store.append_messages(
        "s",
        [
            user(parts, timestamp=1.0),
            assistant("", tool_calls=calls, timestamp=2.0),
            {
                "role": "tool",
                "content": "result",
                "tool_call_id": "c1",
                "tool_name": "f",
                "timestamp": 3.0,
            },
        ],
    )
    assert await store.get_conversation("s") == [
        {"role": "user", "content": parts, "timestamp": 1.0},
        {"role": "assistant", "content": "", "timestamp": 2.0, "tool_calls": calls},
        {
            "role": "tool",
            "content": "result",
            "timestamp": 3.0,
            "tool_call_id": "c1",
            "tool_name": "f",
        },
    ]


async def test_update_usage_accumulates(store: SessionStore) -> None:
    await store.create_session("s")
    await store.update_usage(
        "s", TurnUsage(input_tokens=10, output_tokens=5, api_calls=1, estimated_cost_usd=0.25)
    )
    await store.update_usage(
        "s",
        TurnUsage(
            input_tokens=1,
            output_tokens=2,
            reasoning_tokens=3,
            api_calls=1,
            estimated_cost_usd=0.5,
        ),
    )
    row = await store.get_session("s")
    assert row is not None
    assert (row.input_tokens, row.output_tokens, row.reasoning_tokens, row.api_call_count) == (
        11,
        7,
        3,
        2,
    )
    assert row.estimated_cost_usd == pytest.approx(0.75) and row.actual_cost_usd is None
    with pytest.raises(SessionNotFound):
        await store.update_usage("missing", TurnUsage(input_tokens=1))


async def test_update_usage_records_the_model_only_where_none_is(store: SessionStore) -> None:
    """The model that ran fills a session created without one, and never replaces one."""
    await store.create_session("blank")
    await store.create_session("named", model="chosen")
    for session_id in ("blank", "named"):
        await store.update_usage(session_id, TurnUsage(api_calls=1, model="ran-first"))
        await store.update_usage(session_id, TurnUsage(api_calls=1, model="ran-later"))
    blank, named = await store.get_session("blank"), await store.get_session("named")
    assert blank is not None and blank.model == "ran-first"
    assert named is not None and named.model == "chosen"


async def test_a_turn_append_creates_its_session_and_adds_usage_once(store: SessionStore) -> None:
    """A turn's writes in one call: the session created on first use (source given), the
    messages, and the usage, all skipped by a retry with the same turn key."""
    reply = [{"role": "assistant", "content": "hi"}]
    usage = TurnUsage(input_tokens=4, output_tokens=2, api_calls=1, model="ran")
    user = [{"role": "user", "content": "hello"}]
    assert await store.append_messages("new", user, turn_key="r1:user", create_source="api_server")
    for _ in range(2):  # the second call is a retried attempt's
        await store.append_messages("new", reply, turn_key="r1:reply", usage=usage)
    assert await store.append_messages(  # an existing session is used as it is
        "new", user, turn_key="r2:user", create_source="other"
    )
    row = await store.get_session("new")
    assert row is not None and row.source == "api_server" and row.model == "ran"
    assert (row.message_count, row.input_tokens, row.output_tokens, row.api_call_count) == (
        3,
        4,
        2,
        1,
    )
    with pytest.raises(SessionNotFound):
        await store.append_messages("absent", reply, turn_key="r3:reply", usage=usage)
    assert await store.get_session("absent") is None


# -- fork and lineage --------------------------------------------------------------------------


async def test_fork_copies_transcript_and_ends_source(store: SessionStore) -> None:
    await store.create_session(
        "src",
        model="m1",
        system_prompt="prompt",
        title="T1",
        source="cli",
        model_config={"browser_model_lock": {}},
    )
    await store.append_messages("src", [user("q", timestamp=5.0), assistant("a")])

    fork = await store.fork_session("src", "fork1")
    assert fork.parent_session_id == "src" and fork.source == "api_server"
    assert (fork.model, fork.system_prompt, fork.title) == ("m1", "prompt", "T1 #2")
    assert fork.model_config == {"_branched_from": "src"}
    assert fork.ended_at is None and fork.message_count == 2
    assert [(m.role, m.content) for m in await store.get_messages("fork1")] == [
        ("user", "q"),
        ("assistant", "a"),
    ]
    assert (await store.get_messages("fork1"))[0].timestamp == 5.0

    src = await store.get_session("src")
    assert src is not None and src.end_reason == "branched" and src.ended_at is not None
    assert [m.session_id for m in await store.get_messages("src")] == ["src", "src"]

    # The fork's own new messages never show up in the source.
    await store.append_messages("fork1", [user("only in fork")])
    assert len(await store.get_messages("src")) == 2
    assert (await store.fork_session("src", "fork2")).title == "T1 #3"
    assert (await store.fork_session("fork1", "fork3")).title == "T1 #4"


async def test_fork_titles_explicit_and_untitled(store: SessionStore) -> None:
    await store.create_session("untitled")
    assert (await store.fork_session("untitled", "f1")).title is None
    assert (await store.fork_session("untitled", "f2", title="Chosen")).title == "Chosen"


async def test_failed_fork_leaves_source_untouched(store: SessionStore) -> None:
    await store.create_session("src", title="T1")
    await store.append_messages("src", [user("q")])
    await store.create_session("taken", title="Other")
    with pytest.raises(SessionExists):
        await store.fork_session("src", "taken")
    with pytest.raises(TitleConflict):
        await store.fork_session("src", "new", title="Other")
    with pytest.raises(SessionNotFound):
        await store.fork_session("missing", "new2")
    src = await store.get_session("src")
    assert src is not None and src.ended_at is None and src.end_reason is None
    assert await store.get_session("new") is None
    assert len(await store.get_messages("taken")) == 0


async def test_next_title_in_lineage(store: SessionStore) -> None:
    assert await store.next_title_in_lineage("Fresh") == "Fresh"
    await store.create_session("a", title="X")
    assert await store.next_title_in_lineage("X") == "X #2"
    await store.create_session("b", title="X #7")
    await store.create_session("c", title="x #9")  # other case: another lineage
    await store.create_session("d", title="X #extra")
    assert await store.next_title_in_lineage("X") == "X #8"
    assert await store.next_title_in_lineage("X #7") == "X #8"
    # LIKE wildcards in a title are literal.
    await store.create_session("e", title="a_c")
    await store.create_session("f", title="abc #5")
    assert await store.next_title_in_lineage("a_c") == "a_c #2"


async def test_resolve_tip_follows_compression_chain(store: SessionStore) -> None:
    await store.create_session("root")
    await store.end_session("root", "compression")
    # Children that are not continuations, created after the real one so they are "newer".
    await store.create_session("c1", parent_session_id="root")
    await store.create_session("ended-other", parent_session_id="root")
    await store.end_session("ended-other", "user_closed")
    await store.create_session(
        "branch", parent_session_id="root", model_config={"_branched_from": "root"}
    )
    await store.create_session(
        "delegate", parent_session_id="root", model_config={"_delegate_from": "root"}
    )
    await store.create_session("tool", parent_session_id="root", source="tool")
    await store.end_session("c1", "compression")
    await store.create_session("c2-old", parent_session_id="c1")
    await store.create_session("c2", parent_session_id="c1")  # live and newest

    assert await store.resolve_tip("root") == "c2"
    assert await store.resolve_tip("c1") == "c2"
    assert await store.resolve_tip("c2") == "c2"
    assert await store.resolve_tip("branch") == "branch"
    assert await store.resolve_tip("unknown") == "unknown"


async def test_resolve_tip_stops_without_a_continuation(store: SessionStore) -> None:
    await store.create_session("root")
    await store.end_session("root", "compression")
    await store.create_session(
        "fork", parent_session_id="root", model_config={"_branched_from": "root"}
    )
    assert await store.resolve_tip("root") == "root"
    # An ended (non-compression) child is still taken when it is the only continuation.
    await store.create_session("c1", parent_session_id="root")
    await store.end_session("c1", "user_closed")
    assert await store.resolve_tip("root") == "c1"


async def test_fork_is_not_mistaken_for_a_compression_tip(store: SessionStore) -> None:
    await store.create_session("src")
    await store.append_messages("src", [user("q")])
    await store.fork_session("src", "fork")
    assert await store.resolve_tip("src") == "src"


# -- model config ------------------------------------------------------------------------------


async def test_set_model_config(store: SessionStore) -> None:
    await store.create_session("s", model="old", system_prompt="p", model_config={"a": 1})
    row = await store.set_model_config("s", {"browser_model_lock": {"model": "new"}})
    assert row.model_config == {"browser_model_lock": {"model": "new"}}
    assert (row.model, row.system_prompt) == ("old", "p")  # None keeps the model
    row = await store.set_model_config("s", {"b": 2}, model="new", clear_system_prompt=True)
    assert (row.model, row.system_prompt, row.model_config) == ("new", None, {"b": 2})
    with pytest.raises(SessionNotFound):
        await store.set_model_config("missing", {})


# -- availability ------------------------------------------------------------------------------


async def test_ping_and_closed_store(store: SessionStore) -> None:
    await store.ping()
    await store.close()
    with pytest.raises(StoreUnavailable):
        await store.get_session("s")


async def test_unreachable_database_is_store_unavailable(backend: str, tmp_path: Path) -> None:
    if backend == "sqlite":
        blocker = tmp_path / "not-a-directory"
        blocker.write_text("")
        store = create_store(f"sqlite:///{blocker}/store.db")
    else:
        postgres_url()  # same skip/fail rule as the other postgres tests
        store = create_store("postgresql://postgres@127.0.0.1:1/nowhere")
    try:
        with pytest.raises(StoreUnavailable):
            await store.ping()
        with pytest.raises(StoreUnavailable):
            await store.create_session("s")
    finally:
        await store.close()


# -- URL selection -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "kind", "target"),
    [
        ("sqlite:///relative/path.db", "SqliteSessionStore", "relative/path.db"),
        ("sqlite:////abs/path.db", "SqliteSessionStore", "/abs/path.db"),
        ("sqlite:///:memory:", "SqliteSessionStore", ":memory:"),
        ("postgresql://u@h:5432/db", "PostgresSessionStore", None),
        ("postgres://u@h/db", "PostgresSessionStore", None),
    ],
)
def test_create_store_picks_backend_by_scheme(url: str, kind: str, target: str | None) -> None:
    store = create_store(url)
    assert type(store).__name__ == kind
    if target is not None:
        assert store.path == target  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "url", ["mysql://h/db", "redis://localhost", "no-scheme.db", "sqlite://host/x.db", "sqlite:///"]
)
def test_create_store_rejects_unknown_urls(url: str) -> None:
    with pytest.raises(ValueError):
        create_store(url)


async def test_memory_store_works_without_files() -> None:
    store = create_store("sqlite:///:memory:")
    try:
        await store.migrate()
        await store.create_session("s")
        assert await store.append_messages("s", [user("hi")]) == 1
    finally:
        await store.close()


# -- stored responses (/v1/responses) ----------------------------------------------------------


def response_row(id: str, status: str = "completed", **extra: object) -> ResponseRow:
    body = {"id": id, "object": "response", "status": status, "output": []}
    fields: dict = {
        "session_id": "sess-1",
        "transcript": [user("hi"), assistant("Echo: hi")],
        "run_id": "run_1",
        "model": "hermes-agent",
        "instructions": "be brief",
        **extra,
    }
    return ResponseRow(id=id, status=status, response=body, **fields)


async def test_response_round_trip_and_update(store: SessionStore) -> None:
    await store.put_response(response_row("resp_1", "queued", conversation="c"))
    row = await store.get_response("resp_1")
    assert row is not None and row.status == "queued" and row.conversation == "c"
    assert row.transcript == [user("hi"), assistant("Echo: hi")]
    assert row.instructions == "be brief" and row.run_id == "run_1" and row.created_at > 0
    # Re-storing the same id (a replica settling a finished run) updates it in place.
    await store.put_response(response_row("resp_1", "completed", transcript=[user("x")]))
    row = await store.get_response("resp_1")
    assert row is not None and row.status == "completed" and row.transcript == [user("x")]
    assert row.response["status"] == "completed"
    assert await store.get_response("resp_missing") is None


async def test_conversation_heads_follow_the_latest_and_die_with_it(store: SessionStore) -> None:
    assert await store.conversation_head("chat") is None
    await store.put_response(response_row("resp_1"))
    await store.put_response(response_row("resp_2", previous_response_id="resp_1"))
    await store.set_conversation_head("chat", "resp_1")
    await store.set_conversation_head("chat", "resp_2")
    assert await store.conversation_head("chat") == "resp_2"
    # Visible through another store object on the same database (another replica).
    assert await store.delete_response("resp_2") is True
    assert await store.delete_response("resp_2") is False
    assert await store.get_response("resp_2") is None
    assert await store.conversation_head("chat") is None
    assert await store.get_response("resp_1") is not None


async def test_responses_are_shared_between_store_objects(store_factory: StoreFactory) -> None:
    first, second = store_factory(), store_factory()
    await first.migrate()
    await first.put_response(response_row("resp_shared", transcript=[user("ünïcode \u0000")]))
    await first.set_conversation_head("shared", "resp_shared")
    row = await second.get_response("resp_shared")
    assert row is not None and row.transcript == [user("ünïcode \u0000")]
    assert await second.conversation_head("shared") == "resp_shared"
