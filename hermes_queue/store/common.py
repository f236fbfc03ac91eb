"""Everything both SQL backends share: the session operations, written once in portable SQL.

The two dialects differ in drivers, placeholders (``?`` vs ``$n``), error types and locking,
not in queries. So the operations live here, written with ``?`` placeholders against a tiny
``Conn`` interface, and each backend only supplies connections and transactions (``_read`` /
``_write``) and translates its driver's errors into ``UniqueViolation`` / ``StoreUnavailable``.
One implementation means the two backends cannot drift apart behind the contract suite's back.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, Protocol

from hermes_queue.store import migrations
from hermes_queue.store.base import (
    BRANCH_MARKER,
    END_REASON_BRANCHED,
    END_REASON_COMPRESSION,
    UNSET,
    MessageOrder,
    MessageRow,
    SessionExists,
    SessionNotFound,
    SessionRow,
    StoreError,
    TitleConflict,
    _Unset,
    lineage_base,
    next_lineage_title,
    sanitize_title,
)
from hermes_queue.store.codec import (
    MESSAGE_COLUMNS,
    MESSAGE_DATA_COLUMNS,
    encode_message,
    json_or_none,
    message_from_row,
    pick_continuation,
    session_from_row,
    tool_call_count,
)
from hermes_queue.store.migrations import Dialect
from hermes_queue.store.responses import ResponseStoreMixin

# Portable "no LIMIT": SQLite wants -1 and PostgreSQL ALL; a huge bound works on both.
_UNBOUNDED = 2**62
# Compression chains are short; the bound only stops a corrupted parent cycle from spinning.
_MAX_TIP_HOPS = 100


class UniqueViolation(StoreError):
    """A backend-neutral unique-constraint failure; ``str()`` names the constraint or column."""


class Conn(Protocol):
    """The four calls the shared operations need; SQL uses ``?`` placeholders."""

    async def fetch(self, sql: str, *args: Any) -> list[dict[str, Any]]: ...

    async def fetchrow(self, sql: str, *args: Any) -> dict[str, Any] | None: ...

    async def execute(self, sql: str, *args: Any) -> int:
        """Run one statement; returns the number of rows it changed."""
        ...

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...


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
    " parent_session_id, started_at, title, message_count, tool_call_count)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING RETURNING *"
)


class SqlSessionStore(ResponseStoreMixin, ABC):
    """``SessionStore`` over any backend that can hand out a ``Conn`` for a read or a write.

    ``_write()`` must yield a connection inside one transaction that holds whatever lock makes
    check-then-insert atomic; ``_read()`` a connection with autocommit reads.
    """

    dialect: ClassVar[Dialect]
    # Row lock for read-modify-write inside a transaction (empty where the transaction
    # already holds the database write lock, as SQLite's BEGIN IMMEDIATE does).
    for_update: ClassVar[str] = ""

    @abstractmethod
    def _read(self) -> AbstractAsyncContextManager[Conn]: ...

    @abstractmethod
    def _write(self) -> AbstractAsyncContextManager[Conn]: ...

    @abstractmethod
    async def close(self) -> None: ...

    async def migrate(self, target: int | None = None) -> list[int]:
        async with self._write() as conn:
            return await migrations.apply(conn, self.dialect, target)

    async def schema_version(self) -> int:
        """Highest applied migration (0 before ``migrate``); for health checks and tests."""
        async with self._read() as conn:
            return await migrations.read_version(conn, self.dialect)

    async def ping(self) -> None:
        async with self._read() as conn:
            await conn.fetchrow("SELECT 1 AS ok")

    # -- sessions -------------------------------------------------------------------------

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
            )
        except UniqueViolation as exc:
            if "title" in str(exc):
                raise TitleConflict(f"title {title!r} is already in use") from exc
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
        source: str = "api_server",
        model: str | None = None,
        model_config: dict[str, Any] | None = None,
        system_prompt: str | None = None,
        title: str | None = None,
        parent_session_id: str | None = None,
        user_id: str | None = None,
        session_key: str | None = None,
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
            )
        return session_from_row(row)

    async def get_session(self, id: str) -> SessionRow | None:
        async with self._read() as conn:
            row = await conn.fetchrow("SELECT * FROM sessions WHERE id = ?", id)
        return session_from_row(row) if row else None

    async def list_sessions(
        self,
        limit: int = 50,
        offset: int = 0,
        *,
        source: str | None = None,
        include_children: bool = False,
    ) -> list[SessionRow]:
        if limit < 0 or offset < 0:
            raise ValueError("limit and offset must not be negative")
        clauses, args = [], []
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
                    raise TitleConflict(f"title {clean!r} is already in use") from exc
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

    # -- messages -------------------------------------------------------------------------

    async def append_messages(
        self, session_id: str, messages: list[dict[str, Any]], *, turn_key: str | None = None
    ) -> int:
        """Insert ``messages`` in one transaction and bump the session's counters.

        With ``turn_key``, the first call for (session, turn_key) claims the key and later calls
        are no-ops returning 0, so a retried worker attempt never duplicates a turn. Use one key
        per append call. Returns the number of messages inserted.
        """
        rows = [encode_message(session_id, m, turn_key) for m in messages]
        tool_calls = sum(tool_call_count(m.get("tool_calls")) for m in messages)
        async with self._write() as conn:
            await self._fetch_session(conn, session_id, lock=True)
            if turn_key is not None:
                claimed = await conn.fetchrow(
                    "INSERT INTO message_turns (session_id, turn_key, created_at) VALUES (?, ?, ?)"
                    " ON CONFLICT DO NOTHING RETURNING turn_key",
                    session_id,
                    turn_key,
                    time.time(),
                )
                if claimed is None:
                    return 0
            if not rows:
                return 0
            await conn.executemany(
                f"INSERT INTO messages ({MESSAGE_COLUMNS}, turn_key)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            await conn.execute(
                "UPDATE sessions SET message_count = message_count + ?,"
                " tool_call_count = tool_call_count + ? WHERE id = ?",
                len(rows),
                tool_calls,
                session_id,
            )
        return len(rows)

    async def get_messages(
        self,
        session_id: str,
        limit: int | None = None,
        offset: int = 0,
        order: MessageOrder = "oldest",
    ) -> list[MessageRow]:
        """A page of the transcript, always in chronological order.

        ``order="latest"`` pages from the end (offset 0 = the newest ``limit`` messages), which is
        what VN's default "latest 500" needs; the page itself is still oldest first.
        """
        if order not in ("oldest", "latest"):
            raise ValueError("order must be 'oldest' or 'latest'")
        if (limit is not None and limit < 0) or offset < 0:
            raise ValueError("limit and offset must not be negative")
        direction = "ASC" if order == "oldest" else "DESC"
        async with self._read() as conn:
            rows = await conn.fetch(
                f"SELECT * FROM messages WHERE session_id = ? ORDER BY id {direction}"
                " LIMIT ? OFFSET ?",
                session_id,
                _UNBOUNDED if limit is None else limit,
                offset,
            )
        if order == "latest":
            rows.reverse()
        return [message_from_row(r) for r in rows]

    async def get_conversation(
        self, session_id: str, *, exclude_turn_prefix: str | None = None
    ) -> list[dict[str, Any]]:
        """The whole transcript in the shape an agent takes as history (content parts decoded,
        tool messages whole, optional keys only when set).

        ``exclude_turn_prefix`` leaves out the messages a turn wrote itself, so a retried
        attempt of that turn sees the history its first attempt saw.
        """
        out: list[dict[str, Any]] = []
        for msg in await self.get_messages(session_id):
            if exclude_turn_prefix and (msg.turn_key or "").startswith(exclude_turn_prefix):
                continue
            item: dict[str, Any] = {
                "role": msg.role,
                "content": msg.content,
                "timestamp": msg.timestamp,
            }
            for key in ("tool_calls", "tool_call_id", "tool_name"):
                value = getattr(msg, key)
                if value is not None:
                    item[key] = value
            out.append(item)
        return out

    async def update_usage(
        self,
        session_id: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        api_calls: int = 0,
        estimated_cost_usd: float | None = None,
        actual_cost_usd: float | None = None,
    ) -> None:
        """Add one turn's usage to the session's running totals."""
        sets = [
            f"{col} = {col} + ?"
            for col in (
                "input_tokens",
                "output_tokens",
                "cache_read_tokens",
                "cache_write_tokens",
                "reasoning_tokens",
                "api_call_count",
            )
        ]
        args: list[Any] = [
            input_tokens,
            output_tokens,
            cache_read_tokens,
            cache_write_tokens,
            reasoning_tokens,
            api_calls,
        ]
        for col, value in (
            ("estimated_cost_usd", estimated_cost_usd),
            ("actual_cost_usd", actual_cost_usd),
        ):
            if value is not None:
                sets.append(f"{col} = COALESCE({col}, 0) + ?")
                args.append(float(value))
        async with self._write() as conn:
            changed = await conn.execute(
                f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", *args, session_id
            )
        if not changed:
            raise SessionNotFound(session_id)

    # -- lineage --------------------------------------------------------------------------

    async def _next_title(self, conn: Conn, title: str) -> str:
        base = lineage_base(title)
        escaped = base.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = await conn.fetch(
            "SELECT title FROM sessions WHERE title = ? OR title LIKE ? ESCAPE '\\'",
            base,
            escaped + " #%",
        )
        # SQLite's LIKE ignores ASCII case; keep only exact members of this lineage.
        existing = [
            r["title"] for r in rows if r["title"] == base or lineage_base(r["title"]) == base
        ]
        return next_lineage_title(base, existing)

    async def next_title_in_lineage(self, base: str) -> str:
        """``"T1"`` → ``"T1 #2"`` (or the next free number); a fresh base is returned as is."""
        async with self._read() as conn:
            return await self._next_title(conn, base)

    async def fork_session(
        self, source_id: str, new_id: str, *, title: str | None = None
    ) -> SessionRow:
        """Branch ``source_id`` into ``new_id`` in one transaction, in VN order.

        The child is created first (marked ``_branched_from`` so tip-following never mistakes
        it for a compression continuation), the transcript is copied, and only then is the
        source ended as "branched"; any failure rolls everything back, so the source is never
        left ended without its fork.
        """
        clean = sanitize_title(title)
        async with self._write() as conn:
            src = await self._fetch_session(conn, source_id, lock=True)
            if await conn.fetchrow("SELECT id FROM sessions WHERE id = ?", new_id) is not None:
                raise SessionExists(new_id)
            if clean is None and src["title"]:
                clean = await self._next_title(conn, src["title"])
            await self._insert_session(
                conn,
                new_id,
                source="api_server",
                title=clean,
                model=src["model"],
                model_config={BRANCH_MARKER: source_id},
                system_prompt=src["system_prompt"],
                parent_session_id=source_id,
                user_id=src["user_id"],
                message_count=src["message_count"],
                tool_call_count=src["tool_call_count"],
            )
            await conn.execute(
                f"INSERT INTO messages ({MESSAGE_COLUMNS})"
                f" SELECT CAST(? AS TEXT), {MESSAGE_DATA_COLUMNS}"
                " FROM messages WHERE session_id = ? ORDER BY id",
                new_id,
                source_id,
            )
            await self._end(conn, source_id, END_REASON_BRANCHED)
            row = await self._fetch_session(conn, new_id)
        return session_from_row(row)

    async def resolve_tip(self, session_id: str) -> str:
        """Follow compression continuations forward to the live tip (HERMES_API §6.2).

        Unknown ids and sessions not ended by compression resolve to themselves.
        """
        current, seen = session_id, {session_id}
        async with self._read() as conn:
            for _ in range(_MAX_TIP_HOPS):
                row = await conn.fetchrow("SELECT end_reason FROM sessions WHERE id = ?", current)
                if row is None or row["end_reason"] != END_REASON_COMPRESSION:
                    break
                children = await conn.fetch(
                    "SELECT id, source, model_config, ended_at, end_reason FROM sessions"
                    " WHERE parent_session_id = ? ORDER BY started_at DESC, id DESC",
                    current,
                )
                nxt = pick_continuation(children)
                if nxt is None or nxt in seen:
                    break
                seen.add(nxt)
                current = nxt
        return current
