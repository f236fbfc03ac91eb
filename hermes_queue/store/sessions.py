"""Session rows: create, read, list, update, end, delete, model config and usage totals.

Everything here works on the ``sessions`` table (the list query also peeks at messages for
``last_active`` and the preview). The messages and lineage mixins build on this one: they reuse
its insert, locked-fetch and end helpers rather than writing their own.
"""

from __future__ import annotations

import time
from typing import Any

from hermes_queue.store.backend import Conn, SqlBackend, UniqueViolation
from hermes_queue.store.base import (
    DEFAULT_SESSION_SOURCE,
    UNSET,
    SessionExists,
    SessionNotFound,
    SessionRow,
    TitleConflict,
    TurnUsage,
    _Unset,
    sanitize_title,
)
from hermes_queue.store.codec import json_or_none, session_from_row
from hermes_queue.tenancy.keys import DEFAULT_TENANT

_FIRST_USER = (
    "(SELECT m.{col} FROM messages m WHERE m.session_id = s.id AND m.role = 'user' "
    "ORDER BY m.id LIMIT 1)"
)
_LIST_SQL = (
    "SELECT s.*, "
    "COALESCE((SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = s.id), s.started_at)"
    " AS last_active, "
    + _FIRST_USER.format(col="content")
    + " AS first_user_content, "
    + _FIRST_USER.format(col="content_json")
    + " AS first_user_json "
    "FROM sessions s {where} "
    "ORDER BY last_active DESC, s.started_at DESC, s.id DESC LIMIT ? OFFSET ?"
)
_INSERT_SESSION = (
    "INSERT INTO sessions (id, source, user_id, session_key, model, model_config, system_prompt,"
    " parent_session_id, started_at, title, message_count, tool_call_count, tenant)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING RETURNING *"
)


class SessionRowsMixin(SqlBackend):
    """The ``SessionStore`` operations on the ``sessions`` table itself."""

    async def _insert_session(
        self,
        conn: Conn,
        id: str,
        *,
        source: str,
        title: str | None,
        model: str | None = None,
        model_config: dict[str, Any] | None = None,
        system_prompt: str | None = None,
        parent_session_id: str | None = None,
        user_id: str | None = None,
        session_key: str | None = None,
        message_count: int = 0,
        tool_call_count: int = 0,
        tenant: str = DEFAULT_TENANT,
    ) -> dict[str, Any]:
        """INSERT the row unless the id exists; returns it, or raises SessionExists /
        TitleConflict. Callers already hold a write transaction."""
        try:
            row = await conn.fetchrow(
                _INSERT_SESSION,
                id,
                source,
                user_id,
                session_key,
                model,
                json_or_none(model_config),
                system_prompt,
                parent_session_id,
                time.time(),
                title,
                message_count,
                tool_call_count,
                tenant,
            )
        except UniqueViolation as exc:
            if "title" in str(exc):
                raise TitleConflict(title) from exc
            raise
        if row is None:
            raise SessionExists(id)
        return row

    async def _fetch_session(self, conn: Conn, id: str, *, lock: bool = False) -> dict[str, Any]:
        row = await conn.fetchrow(
            "SELECT * FROM sessions WHERE id = ?" + (self.for_update if lock else ""), id
        )
        if row is None:
            raise SessionNotFound(id)
        return row

    async def create_session(
        self,
        id: str,
        *,
        source: str = DEFAULT_SESSION_SOURCE,
        model: str | None = None,
        model_config: dict[str, Any] | None = None,
        system_prompt: str | None = None,
        title: str | None = None,
        parent_session_id: str | None = None,
        user_id: str | None = None,
        session_key: str | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> SessionRow:
        clean = sanitize_title(title)
        async with self._write() as conn:
            # Checked first so an id clash is reported as such even when the title clashes too.
            if await conn.fetchrow("SELECT id FROM sessions WHERE id = ?", id) is not None:
                raise SessionExists(id)
            row = await self._insert_session(
                conn,
                id,
                source=source,
                title=clean,
                model=model,
                model_config=model_config,
                system_prompt=system_prompt,
                parent_session_id=parent_session_id,
                user_id=user_id,
                session_key=session_key,
                tenant=tenant,
            )
        return session_from_row(row)

    async def get_session(self, id: str) -> SessionRow | None:
        async with self._read() as conn:
            row = await conn.fetchrow("SELECT * FROM sessions WHERE id = ?", id)
        return session_from_row(row) if row else None

    async def title_holder(self, title: str, tenant: str = DEFAULT_TENANT) -> str | None:
        async with self._read() as conn:
            row = await conn.fetchrow(
                "SELECT id FROM sessions WHERE tenant = ? AND title = ?", tenant, title
            )
        return str(row["id"]) if row else None

    async def list_sessions(
        self,
        limit: int = 50,
        offset: int = 0,
        *,
        source: str | None = None,
        include_children: bool = False,
        tenant: str | None = None,
    ) -> list[SessionRow]:
        """Newest activity first; ``tenant``: that tenant's only (None: every tenant's)."""
        if limit < 0 or offset < 0:
            raise ValueError("limit and offset must not be negative")
        clauses, args = [], []
        if tenant is not None:
            clauses.append("s.tenant = ?")
            args.append(tenant)
        if not include_children:
            clauses.append("s.parent_session_id IS NULL")
        if source is not None:
            clauses.append("s.source = ?")
            args.append(source)
        where = ("WHERE " + " AND ".join(clauses)) if clauses else ""
        async with self._read() as conn:
            rows = await conn.fetch(_LIST_SQL.format(where=where), *args, limit, offset)
        return [session_from_row(r) for r in rows]

    async def _end(self, conn: Conn, id: str, reason: str) -> bool:
        changed = await conn.execute(
            "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
            time.time(),
            reason,
            id,
        )
        return changed > 0

    async def update_session(
        self,
        id: str,
        *,
        title: str | _Unset | None = UNSET,
        end_reason: str | _Unset = UNSET,
    ) -> SessionRow:
        clean = None if isinstance(title, _Unset) else sanitize_title(title)
        async with self._write() as conn:
            await self._fetch_session(conn, id, lock=True)
            if not isinstance(title, _Unset):
                try:
                    await conn.execute("UPDATE sessions SET title = ? WHERE id = ?", clean, id)
                except UniqueViolation as exc:
                    raise TitleConflict(clean) from exc
            if not isinstance(end_reason, _Unset):
                await self._end(conn, id, end_reason)
            row = await self._fetch_session(conn, id)
        return session_from_row(row)

    async def end_session(self, id: str, reason: str) -> bool:
        """End a live session; False when unknown or already ended (the first reason wins)."""
        async with self._write() as conn:
            return await self._end(conn, id, reason)

    async def delete_session(self, id: str) -> bool:
        """Delete a session and (by cascade) its messages; its children become roots, as
        upstream orphans them, so they stay reachable in listings."""
        async with self._write() as conn:
            await conn.execute(
                "UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id = ?", id
            )
            return await conn.execute("DELETE FROM sessions WHERE id = ?", id) > 0

    async def set_model_config(
        self,
        session_id: str,
        model_config: dict[str, Any],
        *,
        model: str | None = None,
        clear_system_prompt: bool = False,
    ) -> SessionRow:
        prompt = ", system_prompt = NULL" if clear_system_prompt else ""
        async with self._write() as conn:
            changed = await conn.execute(
                f"UPDATE sessions SET model_config = ?, model = COALESCE(?, model){prompt} "
                "WHERE id = ?",
                json_or_none(model_config),
                model,
                session_id,
            )
            if not changed:
                raise SessionNotFound(session_id)
            row = await self._fetch_session(conn, session_id)
        return session_from_row(row)

    async def update_usage(self, session_id: str, usage: TurnUsage) -> None:
        """Add one turn's usage to the session's running totals (:class:`TurnUsage`)."""
        async with self._write() as conn:
            await self._add_usage(conn, session_id, usage)

    async def _add_usage(self, conn: Conn, session_id: str, usage: TurnUsage) -> None:
        """``usage`` into the session's totals, in the caller's write transaction."""
        counters = {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
            "reasoning_tokens": usage.reasoning_tokens,
            "api_call_count": usage.api_calls,
        }
        sets = [f"{col} = {col} + ?" for col in counters]
        args: list[Any] = list(counters.values())
        for col, value in (
            ("estimated_cost_usd", usage.estimated_cost_usd),
            ("actual_cost_usd", usage.actual_cost_usd),
        ):
            if value is not None:
                sets.append(f"{col} = COALESCE({col}, 0) + ?")
                args.append(float(value))
        if usage.model:
            sets.append("model = COALESCE(model, ?)")
            args.append(usage.model)
        changed = await conn.execute(
            f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", *args, session_id
        )
        if not changed:
            raise SessionNotFound(session_id)
