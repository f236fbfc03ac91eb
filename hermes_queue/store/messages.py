"""Transcripts: idempotent appends, chronological pages, and the agent-shaped history.

Appends bump the owning session's counters in the same transaction and claim a per-turn key so
a retried worker attempt never writes a turn twice; reads page from either end of the
transcript but always return it oldest first. Separate from session rows because messages have
their own table, idempotency rule and pagination.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from hermes_queue.store.backend import Conn
from hermes_queue.store.base import (
    MessageOrder,
    MessageRow,
    SessionExists,
    SessionNotFound,
    TurnUsage,
)
from hermes_queue.store.codec import (
    MESSAGE_COLUMNS,
    encode_message,
    message_from_row,
    tool_call_count,
)
from hermes_queue.store.sessions import SessionRowsMixin
from hermes_queue.tenancy.keys import DEFAULT_TENANT

# Portable "no LIMIT": SQLite wants -1 and PostgreSQL ALL; a huge bound works on both.
_UNBOUNDED = 2**62


class MessagesMixin(SessionRowsMixin):
    """``append_messages``, ``start_turn``, ``get_messages`` and ``get_conversation``."""

    async def append_messages(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        *,
        turn_key: str | None = None,
        create_source: str | None = None,
        usage: TurnUsage | None = None,
        tenant: str | None = None,
    ) -> int:
        """Insert ``messages`` in one transaction and bump the session's counters.

        With ``turn_key``, the first call for (session, turn_key) claims the key and later calls
        are no-ops returning 0, so a retried worker attempt never duplicates a turn. Use one key
        per append call. Returns the number of messages inserted.

        In the same transaction (a turn's writes are on every turn's path, and each transaction
        is a commit and, on SQLite, a turn of the database's one write lock): with
        ``create_source``, the session is created first when missing (with that source), and
        ``usage`` is added to its totals when the messages are inserted. With ``tenant``, the
        session is created as that tenant's, and one of another tenant's is not found
        (``SessionNotFound``): a turn never writes into another tenant's transcript.
        """
        async with self._write() as conn:
            return await self._append(
                conn, session_id, messages, turn_key, create_source, usage, tenant
            )

    async def start_turn(
        self,
        session_id: str,
        message: dict[str, Any],
        *,
        turn_key: str,
        create_source: str | None = None,
        history_excluding: str | None = None,
        tenant: str | None = None,
    ) -> list[dict[str, Any]] | None:
        """A turn's start in one transaction: the history it runs on (with
        ``history_excluding``: ``get_conversation``'s ``exclude_turn_prefix``; else None), and
        its user message appended as ``append_messages`` does (keyed by ``turn_key``).

        One operation because both are on the way to a turn's first token, and each store
        operation is a hand-off to SQLite's thread and back (or a PostgreSQL round trip); one
        transaction also means one commit. (At 32 streaming turns on one worker the TTFT
        gain was within the noise of three A/B pairs: docs/performance.md, design choices.)
        """
        async with self._write() as conn:
            history = None
            if history_excluding is not None:
                history = await self._conversation(conn, session_id, history_excluding)
            await self._append(conn, session_id, [message], turn_key, create_source, None, tenant)
        return history

    async def _append(
        self,
        conn: Conn,
        session_id: str,
        messages: list[dict[str, Any]],
        turn_key: str | None,
        create_source: str | None,
        usage: TurnUsage | None,
        tenant: str | None = None,
    ) -> int:
        rows = [encode_message(session_id, m, turn_key) for m in messages]
        tool_calls = sum(tool_call_count(m.get("tool_calls")) for m in messages)
        created = False
        if create_source is not None:
            with contextlib.suppress(SessionExists):
                await self._insert_session(
                    conn,
                    session_id,
                    source=create_source,
                    title=None,
                    tenant=tenant or DEFAULT_TENANT,
                )
                created = True
        if not created:
            found = await self._fetch_session(conn, session_id, lock=True)
            if tenant is not None and found["tenant"] != tenant:
                raise SessionNotFound(session_id)
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
        if usage is not None:
            await self._add_usage(conn, session_id, usage)
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
        async with self._read() as conn:
            return await self._messages(conn, session_id, limit, offset, order)

    async def _messages(
        self, conn: Conn, session_id: str, limit: int | None, offset: int, order: MessageOrder
    ) -> list[MessageRow]:
        direction = "ASC" if order == "oldest" else "DESC"
        rows = await conn.fetch(
            f"SELECT * FROM messages WHERE session_id = ? ORDER BY id {direction} LIMIT ? OFFSET ?",
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
        async with self._read() as conn:
            return await self._conversation(conn, session_id, exclude_turn_prefix)

    async def _conversation(
        self, conn: Conn, session_id: str, exclude_turn_prefix: str | None
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for msg in await self._messages(conn, session_id, None, 0, "oldest"):
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
