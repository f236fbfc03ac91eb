"""Stored Responses and conversation names (``/v1/responses``), for both SQL backends.

Upstream keeps these in a per-host SQLite file, so ``previous_response_id`` only works on the
replica that answered the first turn. Here they live in the shared session database: a chained
request may reach any replica. A mixin of its own, apart from the session operations
(``sessions.py``, ``messages.py``, ``lineage.py``), because the two have nothing in common but
the connection plumbing.
"""

from __future__ import annotations

import json
import time
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hermes_queue.tenancy.keys import DEFAULT_TENANT

if TYPE_CHECKING:
    from hermes_queue.store.backend import Conn


@dataclass(frozen=True)
class ResponseRow:
    """One stored response: the client-visible object plus what chaining needs."""

    id: str
    session_id: str
    status: str
    response: dict[str, Any]
    # The history the turn saw plus its own user/assistant/tool messages.
    transcript: list[dict[str, Any]] = field(default_factory=list)
    run_id: str | None = None
    previous_response_id: str | None = None
    conversation: str | None = None
    model: str | None = None
    instructions: str | None = None
    created_at: float = 0.0
    # Its owner (tenancy/keys.py): another tenant's id is not found, and chains stay in one tenant.
    tenant: str = DEFAULT_TENANT


_UPSERT = (
    "INSERT INTO responses (id, run_id, session_id, previous_response_id, conversation, model,"
    " instructions, status, response, transcript, created_at, tenant)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (id) DO UPDATE SET status = excluded.status,"
    " response = excluded.response, transcript = excluded.transcript"
)


def _row(raw: dict[str, Any]) -> ResponseRow:
    return ResponseRow(
        id=raw["id"],
        session_id=raw["session_id"],
        status=raw["status"],
        response=json.loads(raw["response"]),
        transcript=json.loads(raw["transcript"]),
        run_id=raw["run_id"],
        previous_response_id=raw["previous_response_id"],
        conversation=raw["conversation"],
        model=raw["model"],
        instructions=raw["instructions"],
        created_at=float(raw["created_at"]),
        tenant=raw.get("tenant") or DEFAULT_TENANT,
    )


class ResponseStoreMixin:
    """``put/get/delete_response`` and conversation heads over the backend's connections."""

    def _read(self) -> AbstractAsyncContextManager[Conn]:
        raise NotImplementedError

    def _write(self) -> AbstractAsyncContextManager[Conn]:
        raise NotImplementedError

    async def put_response(self, row: ResponseRow) -> None:
        """Insert, or update status/object/transcript of, a response (re-storing is harmless:
        several replicas may settle the same finished run)."""
        async with self._write() as conn:
            await conn.execute(
                _UPSERT,
                row.id,
                row.run_id,
                row.session_id,
                row.previous_response_id,
                row.conversation,
                row.model,
                row.instructions,
                row.status,
                json.dumps(row.response, ensure_ascii=False),
                json.dumps(row.transcript, ensure_ascii=False),
                row.created_at or time.time(),
                row.tenant,
            )

    async def get_response(self, id: str) -> ResponseRow | None:
        async with self._read() as conn:
            raw = await conn.fetchrow("SELECT * FROM responses WHERE id = ?", id)
        return _row(raw) if raw else None

    async def delete_response(self, id: str) -> bool:
        """Delete a response; conversation names pointing at it are dropped too (upstream
        drops the mapping when its response is evicted)."""
        async with self._write() as conn:
            await conn.execute("DELETE FROM conversations WHERE response_id = ?", id)
            return await conn.execute("DELETE FROM responses WHERE id = ?", id) > 0

    async def conversation_head(self, name: str, tenant: str = DEFAULT_TENANT) -> str | None:
        """The latest response id of the tenant's named conversation, or None."""
        async with self._read() as conn:
            raw = await conn.fetchrow(
                "SELECT response_id FROM conversations WHERE tenant = ? AND name = ?", tenant, name
            )
        return str(raw["response_id"]) if raw else None

    async def set_conversation_head(
        self, name: str, response_id: str, tenant: str = DEFAULT_TENANT
    ) -> None:
        async with self._write() as conn:
            await conn.execute(
                "INSERT INTO conversations (tenant, name, response_id, updated_at)"
                " VALUES (?, ?, ?, ?)"
                " ON CONFLICT (tenant, name) DO UPDATE SET response_id = excluded.response_id,"
                " updated_at = excluded.updated_at",
                tenant,
                name,
                response_id,
                time.time(),
            )
