"""The SQL session store both backends build on: the operation mixins, assembled.

The operations are written once in portable SQL, one mixin per concern (``sessions.py``,
``messages.py``, ``lineage.py``, ``responses.py``, ``jobs.py``), against the ``Conn`` seam in
``backend.py``; ``sqlite.py`` and ``postgres.py`` subclass ``SqlSessionStore`` and only supply
connections, transactions and error translation. One implementation means the two backends cannot
drift apart behind the contract suite's back. What is left here concerns the database as a whole:
applying migrations, the schema version, a liveness ping and its row counts.
"""

from __future__ import annotations

from hermes_queue.store import migrations
from hermes_queue.store.jobs import JobsMixin
from hermes_queue.store.lineage import LineageMixin
from hermes_queue.store.messages import MessagesMixin
from hermes_queue.store.responses import ResponseStoreMixin


class SqlSessionStore(LineageMixin, MessagesMixin, ResponseStoreMixin, JobsMixin):
    """``SessionStore`` over any ``SqlBackend``: every operation mixin, plus schema and health."""

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

    async def row_counts(self) -> dict[str, int]:
        """Sessions and messages stored: a probe showing 0 of each says "new, empty store",
        which is how a mistyped path or database name shows itself."""
        async with self._read() as conn:
            row = await conn.fetchrow(
                "SELECT (SELECT COUNT(*) FROM sessions) AS sessions, "
                "(SELECT COUNT(*) FROM messages) AS messages"
            )
        assert row is not None
        return {"sessions": int(row["sessions"]), "messages": int(row["messages"])}
