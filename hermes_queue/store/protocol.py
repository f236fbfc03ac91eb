"""The ``SessionStore`` protocol: what callers may ask of the session store.

Both backends (``sqlite.py``, ``postgres.py``) satisfy it through ``SqlSessionStore``, and one
contract suite (tests/store) runs against both; row types, errors and projections are in
``base.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from hermes_queue.store.base import (
    DEFAULT_SESSION_SOURCE,
    UNSET,
    MessageOrder,
    MessageRow,
    SessionRow,
    TurnUsage,
    _Unset,
)
from hermes_queue.store.responses import ResponseRow
from hermes_queue.tenancy.keys import DEFAULT_TENANT

if TYPE_CHECKING:  # store.jobs builds on the SQL seam, which imports base.py
    from hermes_queue.store.jobs import FireRecord, JobRow, JobRunRow


@runtime_checkable
class SessionStore(Protocol):
    """Async session store. Every method may raise ``StoreUnavailable``."""

    async def migrate(self, target: int | None = None) -> list[int]:
        """Apply pending schema migrations (up to ``target``); returns the versions applied."""
        ...

    async def schema_version(self) -> int:
        """Highest applied migration version; 0 for a database never migrated."""
        ...

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Round-trip to the database; raises ``StoreUnavailable`` when it cannot."""
        ...

    async def row_counts(self) -> dict[str, int]:
        """``{"sessions": n, "messages": n}`` (for ``hermes-queue check``, /health/detailed)."""
        ...

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
    ) -> SessionRow: ...

    async def get_session(self, id: str) -> SessionRow | None: ...

    async def title_holder(self, title: str, tenant: str = DEFAULT_TENANT) -> str | None:
        """The id of the tenant's session with this (sanitised) title, if any."""
        ...

    async def list_sessions(
        self,
        limit: int = 50,
        offset: int = 0,
        *,
        source: str | None = None,
        include_children: bool = False,
        tenant: str | None = None,
    ) -> list[SessionRow]: ...

    async def update_session(
        self,
        id: str,
        *,
        title: str | _Unset | None = UNSET,
        end_reason: str | _Unset = UNSET,
    ) -> SessionRow: ...

    async def end_session(self, id: str, reason: str) -> bool: ...

    async def delete_session(self, id: str) -> bool: ...

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
        """Insert a turn's messages, keyed by ``turn_key`` (a retry is a no-op returning 0);
        in the same transaction, create the session when missing (``create_source``) and add
        ``usage`` to its totals."""
        ...

    async def get_messages(
        self,
        session_id: str,
        limit: int | None = None,
        offset: int = 0,
        order: MessageOrder = "oldest",
    ) -> list[MessageRow]: ...

    async def get_conversation(
        self, session_id: str, *, exclude_turn_prefix: str | None = None
    ) -> list[dict[str, Any]]: ...

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
        """In one transaction: the turn's history (``get_conversation`` with
        ``exclude_turn_prefix=history_excluding``; None when not asked for) and its user
        message appended (``append_messages`` with ``turn_key`` and ``create_source``)."""
        ...

    async def update_usage(self, session_id: str, usage: TurnUsage) -> None:
        """Add one turn's usage to the session's totals (costs counted from 0 once given;
        the model that ran recorded when the session has none yet)."""
        ...

    async def fork_session(
        self, source_id: str, new_id: str, *, title: str | None = None
    ) -> SessionRow: ...

    async def next_title_in_lineage(self, base: str, tenant: str = DEFAULT_TENANT) -> str: ...

    async def resolve_tip(self, session_id: str) -> str: ...

    async def set_model_config(
        self,
        session_id: str,
        model_config: dict[str, Any],
        *,
        model: str | None = None,
        clear_system_prompt: bool = False,
    ) -> SessionRow: ...

    # -- stored responses (/v1/responses) -------------------------------------------------

    async def put_response(self, row: ResponseRow) -> None: ...

    async def get_response(self, id: str) -> ResponseRow | None: ...

    async def delete_response(self, id: str) -> bool: ...

    async def conversation_head(self, name: str, tenant: str = DEFAULT_TENANT) -> str | None: ...

    async def set_conversation_head(
        self, name: str, response_id: str, tenant: str = DEFAULT_TENANT
    ) -> None: ...

    # -- scheduled jobs (/api/jobs; store/jobs.py) -----------------------------------------

    async def create_job(self, job: JobRow) -> JobRow: ...

    async def ensure_job_session(self, job: JobRow) -> None: ...

    async def get_job(self, id: str) -> JobRow | None: ...

    async def list_jobs(
        self, *, include_disabled: bool = False, tenant: str | None = None
    ) -> list[JobRow]: ...

    async def update_job(self, id: str, changes: Mapping[str, Any]) -> JobRow | None: ...

    async def delete_job(self, id: str) -> bool: ...

    async def due_jobs(self, now: float, limit: int = 100) -> list[JobRow]: ...

    async def job_fire_recorded(self, run_id: str) -> bool: ...

    async def record_fire(self, fire: FireRecord) -> bool: ...

    async def job_runs(self, job_id: str, limit: int = 20) -> list[JobRunRow]: ...

    async def open_job_runs(self, limit: int = 500) -> list[JobRunRow]: ...

    async def settle_job_run(
        self,
        run_id: str,
        *,
        status: str,
        output: str | None = None,
        error: str | None = None,
        finished_at: float | None = None,
        last_status: str | None = None,
    ) -> bool: ...
