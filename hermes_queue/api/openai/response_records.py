"""Stored ``/v1/responses`` objects kept in step with their runs, from any replica.

With ``store`` (the default) a ``queued`` row is written before the run is enqueued
(:class:`QueuedResponse`), and the final object when the run ends, by
:meth:`StoredResponses.settle`, which replays the run's canonical events through
:class:`ResponseFold`. The creating process settles in a watcher task that outlives the
client's connection (one of the process's ``BackgroundTasks``); should that process die first,
the next ``GET`` (or a chained request) on any replica finds the run terminal and settles it
itself. Re-settling is harmless (an upsert of the same object), so no coordination is needed.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Any

from hermes_queue.api.errors import ApiError
from hermes_queue.api.feed import RunFeed, RunUnfinished
from hermes_queue.api.openai.responses_render import (
    FINAL_RESPONSE_STATUSES,
    ResponseFold,
    ResponseMeta,
    response_id_for,
)
from hermes_queue.api.state import ApiState, BackgroundTasks
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.store import ResponseRow
from hermes_queue.store.protocol import SessionStore


@dataclass(frozen=True)
class QueuedResponse:
    """The ``queued`` row of a stored response, kept beside its run (``turns.starter.SideRecord``):
    written before the run exists, so a reader that finds the run finds the response too."""

    store: SessionStore
    turn: TurnRequest
    tenant: str

    async def write(self, run_id: str, session_id: str) -> None:
        info = ResponseMeta.from_request(run_id, self.turn)
        user = {"role": "user", "content": self.turn.message}
        await self.store.put_response(
            ResponseRow(
                id=info.id,
                run_id=run_id,
                session_id=session_id,
                status="queued",
                response=info.envelope("queued"),
                transcript=[*self.turn.history, user],
                previous_response_id=info.previous_response_id,
                conversation=info.conversation,
                model=info.model,
                instructions=info.instructions,
                created_at=float(info.created_at),
                tenant=self.tenant,
            )
        )

    async def remove(self, run_id: str) -> None:
        await self.store.delete_response(response_id_for(run_id))


class StoredResponses:
    """Stored responses as a request sees them: each read or settled from the store and the
    run, through the process's services (nothing is kept here)."""

    def __init__(
        self,
        runs: RunRepository,
        feed: RunFeed,
        store: SessionStore,
        background: BackgroundTasks,
    ) -> None:
        self._runs = runs
        self._feed = feed
        self._store = store
        self._background = background

    @classmethod
    def of(cls, state: ApiState) -> StoredResponses:
        return cls(state.runs, state.feed, state.store, state.background)

    def queued(self, turn: TurnRequest, tenant: str) -> QueuedResponse | None:
        """The row to write before the turn's run (``tenant``'s), or None when it is not
        stored."""
        if turn.response is None or not turn.response.store:
            return None
        return QueuedResponse(self._store, turn, tenant)

    async def settle(self, run_id: str) -> dict[str, Any]:
        """Replay the run to its terminal event; store the final object (with ``store``)."""
        record = await self._runs.get(run_id)
        if record is None:
            raise ApiError(500, "internal_error", f"Run {run_id} of this response has expired")
        meta = ResponseMeta.from_request(run_id, record.request)
        fold = ResponseFold(meta, streamed=meta.stream)
        try:
            # A background task: a client's cut at the drain bound is counted by its stream.
            await self._feed.final_reply(run_id, fold.feed, dialect=None)
        except RunUnfinished:  # DrainCut included
            pass  # the process is stopping: answer how far the run got, store nothing
        final = fold.snapshot()
        if meta.store and final["status"] in FINAL_RESPONSE_STATUSES:
            turn = record.request
            user = {"role": "user", "content": turn.message}
            transcript = [*turn.history, user, *fold.messages]
            await self._store.put_response(
                ResponseRow(
                    id=meta.id,
                    run_id=run_id,
                    session_id=record.session_id,
                    status=final["status"],
                    response=final,
                    transcript=transcript,
                    previous_response_id=meta.previous_response_id,
                    conversation=meta.conversation,
                    model=meta.model,
                    instructions=meta.instructions,
                    created_at=float(meta.created_at),
                    tenant=record.tenant,  # the run's, which is its response's
                )
            )
            if meta.conversation and final["status"] == "completed":
                await self._store.set_conversation_head(meta.conversation, meta.id, record.tenant)
        return final

    def watch(self, run_id: str) -> asyncio.Task[dict[str, Any]]:
        """Settle the run in the background, whether or not its client stays."""
        return self._background.start(self.settle(run_id))

    async def load(self, response_id: str, tenant: str) -> ResponseRow | None:
        """The tenant's stored response, settled first if its run has ended (from any
        replica); another tenant's is None, as one that does not exist."""
        row = await self._store.get_response(response_id)
        if row is not None and row.tenant != tenant:
            return None
        if row is None or row.status in FINAL_RESPONSE_STATUSES or not row.run_id:
            return row
        record = await self._runs.get(row.run_id)
        if record is None:
            return row
        if record.terminal:
            await self.settle(row.run_id)
            return await self._store.get_response(response_id)
        if record.status != "queued" and row.response.get("status") == "queued":
            live = {**row.response, "status": "in_progress"}
            return dataclasses.replace(row, status="in_progress", response=live)
        return row
