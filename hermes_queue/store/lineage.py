"""Lineage: forks, numbered lineage titles, and following compression to the live tip.

A session's relatives are found through ``parent_session_id``: a fork copies the transcript into
a child marked as a branch and ends the source ``branched``; compression ends a session and
continues it in a child, which ``resolve_tip`` follows forward (upstream-api.md §6.2). These
queries walk between sessions rather than within one, hence their own module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_queue.store.backend import Conn
from hermes_queue.store.base import (
    BRANCH_MARKER,
    DEFAULT_SESSION_SOURCE,
    END_REASON_BRANCHED,
    END_REASON_COMPRESSION,
    SessionExists,
    SessionRow,
    lineage_base,
    next_lineage_title,
    sanitize_title,
)
from hermes_queue.store.codec import (
    MESSAGE_COLUMNS,
    MESSAGE_DATA_COLUMNS,
    pick_continuation,
    session_from_row,
)
from hermes_queue.store.sessions import SessionRowsMixin
from hermes_queue.tenancy.keys import DEFAULT_TENANT

if TYPE_CHECKING:
    from hermes_queue.store.protocol import SessionStore


async def tip_of(store: SessionStore, row: SessionRow) -> str:
    """``row``'s live tip: the session itself unless compression ended it, which needs no
    store read (the row is at hand: one hop less per turn), else ``resolve_tip``."""
    if row.end_reason != END_REASON_COMPRESSION:
        return row.id
    return await store.resolve_tip(row.id)


# Compression chains are short; the bound only stops a corrupted parent cycle from spinning.
_MAX_TIP_HOPS = 100


class LineageMixin(SessionRowsMixin):
    """``fork_session``, ``next_title_in_lineage`` and ``resolve_tip``."""

    async def _next_title(self, conn: Conn, title: str, tenant: str) -> str:
        base = lineage_base(title)
        escaped = base.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = await conn.fetch(
            "SELECT title FROM sessions WHERE tenant = ? AND (title = ? OR title LIKE ? ESCAPE"
            " '\\')",
            tenant,
            base,
            escaped + " #%",
        )
        # SQLite's LIKE ignores ASCII case; keep only exact members of this lineage.
        existing = [
            r["title"] for r in rows if r["title"] == base or lineage_base(r["title"]) == base
        ]
        return next_lineage_title(base, existing)

    async def next_title_in_lineage(self, base: str, tenant: str = DEFAULT_TENANT) -> str:
        """``"T1"`` → ``"T1 #2"`` (or the next free number among the tenant's titles); a fresh
        base is returned as is."""
        async with self._read() as conn:
            return await self._next_title(conn, base, tenant)

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
                clean = await self._next_title(conn, src["title"], src["tenant"])
            await self._insert_session(
                conn,
                new_id,
                source=DEFAULT_SESSION_SOURCE,
                title=clean,
                model=src["model"],
                model_config={BRANCH_MARKER: source_id},
                system_prompt=src["system_prompt"],
                parent_session_id=source_id,
                user_id=src["user_id"],
                message_count=src["message_count"],
                tool_call_count=src["tool_call_count"],
                tenant=src["tenant"],  # a fork is its source's tenant's
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
        """Follow compression continuations forward to the live tip (upstream-api.md §6.2).

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
