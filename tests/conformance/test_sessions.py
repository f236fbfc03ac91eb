"""Session resources: create, read, list, update, delete, fork, transcript
(upstream-api.md §2, §6)."""

from __future__ import annotations

from tests.conformance.conftest import Sides
from tests.conformance.exchange import Side
from tests.conformance.scripts import conform, create_session, messages_of


async def test_create_read_update_delete(sides: Sides) -> None:
    sid, nonce = f"conf-{sides.nonce}", sides.nonce

    async def script(side: Side) -> None:
        await create_session(
            side, sid, title=f"Plans {nonce}", model="some-model", system_prompt="Be brief."
        )
        await side.call("GET", f"/api/sessions/{sid}", label="GET /api/sessions/{sid}")
        for body in (
            {"title": f"Renamed {nonce}"},
            {"title": None},
            {"end_reason": "user_closed"},
            {"pinned": True},
        ):
            await side.call(
                "PATCH", f"/api/sessions/{sid}", json_body=body, label="PATCH /api/sessions/{sid}"
            )
        await messages_of(side, sid)
        for _ in range(2):
            await side.call("DELETE", f"/api/sessions/{sid}", label="DELETE /api/sessions/{sid}")
        await side.call("GET", f"/api/sessions/{sid}", label="GET /api/sessions/{sid}")
        await messages_of(side, sid)

    await conform(sides, script)


async def test_create_refusals_and_defaults(sides: Sides) -> None:
    sid, nonce = f"conf-{sides.nonce}", sides.nonce

    async def script(side: Side) -> None:
        await create_session(side, sid, title=f"Taken {nonce}")
        await create_session(side, sid)  # 409
        await create_session(side, f"other-{nonce}", title=f"Taken {nonce}")  # title in use
        await create_session(side, "bad\nid")
        await create_session(side, "x" * 300)
        await create_session(side, f"prompt-{nonce}", system_prompt=["not", "a", "string"])
        await side.call(
            "POST",
            "/api/sessions",
            data="{not json",
            label="POST /api/sessions (bad JSON)",
            headers={"Content-Type": "application/json"},
        )
        await side.call("POST", "/api/sessions", json_body={}, label="POST /api/sessions (no id)")

    await conform(sides, script)


async def test_list_pages_newest_first(sides: Sides) -> None:
    nonce = sides.nonce

    async def script(side: Side) -> None:
        for index in range(3):
            await create_session(side, f"conf-{nonce}-{index}", title=f"L{index} {nonce}")
        for query in ("?limit=2", "?limit=2&offset=1", "?limit=1&source=api_server"):
            await side.call("GET", f"/api/sessions{query}", label=f"GET /api/sessions{query}")

    await conform(sides, script)


async def test_fork_copies_the_transcript(sides: Sides) -> None:
    sid, nonce = f"conf-{sides.nonce}", sides.nonce

    async def script(side: Side) -> None:
        await create_session(side, sid, title=f"Trip {nonce}")
        await side.call(
            "POST",
            f"/api/sessions/{sid}/chat",
            json_body={"message": f"pack for rain #{nonce}"},
            label="POST /api/sessions/{sid}/chat",
        )
        await side.call(
            "POST",
            f"/api/sessions/{sid}/fork",
            json_body={"id": f"{sid}-fork"},
            label="POST /api/sessions/{sid}/fork",
        )
        await side.call(
            "POST",
            f"/api/sessions/{sid}/fork",
            json_body={"id": f"{sid}-fork"},
            label="POST /api/sessions/{sid}/fork (same id)",
        )
        await side.call("GET", f"/api/sessions/{sid}-fork", label="GET /api/sessions/{fork}")
        await messages_of(side, f"{sid}-fork")
        await side.call("GET", f"/api/sessions/{sid}", label="GET /api/sessions/{sid}")
        await messages_of(side, sid)
        await side.call(
            "POST", "/api/sessions/conf-missing-x/fork", json_body={}, label="POST fork (missing)"
        )

    await conform(sides, script)
