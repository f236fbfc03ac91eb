"""Starting a turn: the one way every endpoint enqueues one.

``/v1/runs``, ``/v1/chat/completions``, ``/v1/responses`` and session chat each parse their
body into a :class:`NewTurn` (the :class:`TurnRequest`, its runtime selection and where it
runs), then call :meth:`TurnStarter.enqueue_turn`, which

1. admits it: backpressure answers 429 before anything is written;
2. prepares a stored session: persists a newly confirmed model lock, or creates the session on
   first use, and resolves its live tip (the session the turn runs on);
3. writes what the endpoint keeps beside the run (a ``queued`` response), if anything;
4. starts the run (``runs/start.py``, the one way runs are started, the scheduler's too): its
   record and queue entry in one script, under the one-active-run-per-session rule for a
   stored session,

and returns the run id and the session id, which the endpoint renders in its own dialect, with
:func:`turn_headers`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from hermes_queue.api.errors import ApiError, session_not_found
from hermes_queue.api.turns.backpressure import Backpressure
from hermes_queue.api.turns.runtime_selection import persist_lock
from hermes_queue.redisio.replication import NotReplicated
from hermes_queue.routing import Selection
from hermes_queue.runs.model import NewRun, Persist
from hermes_queue.runs.start import RunStarter, Strategy
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.store import SessionExists, SessionRow
from hermes_queue.store.lineage import tip_of
from hermes_queue.store.protocol import SessionStore

if TYPE_CHECKING:
    from hermes_queue.tracing.spans import Tracing


@dataclass(frozen=True)
class RunSession:
    """A session whose history the client sends with each turn (``/v1/runs``, stateless chat
    completions, responses): the turn runs at once, beside any other on the same session.
    ``session_id`` None: the run id names the session. ``persisted`` (``/v1/runs``, as
    upstream's agent saves its turns): the worker also appends the turn to the session's stored
    transcript (creating the session on first use), so ``/api/sessions/{id}/messages`` shows it
    and a stored-session turn (chat completions with ``X-Hermes-Session-Id``) continues it; the
    turn's own history is still the one the client sent."""

    session_id: str | None = None
    persisted: bool = False


@dataclass(frozen=True)
class StoredSession:
    """A session in the SQL store: its turns run one at a time and the worker appends each to
    its transcript (which is also the history the worker gives the agent)."""

    session_id: str
    strategy: Strategy = "enqueue"
    # Chat completions' X-Hermes-Session-Id: a session the store does not hold yet is created.
    create_missing: bool = False
    # Session chat: the session's row, whose model lock the turn confirms when its selection
    # says so (``Selection.persist_lock``).
    lock_row: SessionRow | None = None


@dataclass(frozen=True)
class NewTurn:
    """A turn an endpoint parsed and validated, ready to enqueue."""

    request: TurnRequest
    selection: Selection
    session: RunSession | StoredSession
    # The model the client named, recorded when the selection resolves none (the advertised
    # model name when the client named none either).
    named_model: str = ""
    # Its client reads it as an OpenAI stream, which cannot take back text it was shown: a
    # worker lost mid-text then ends the run rather than resuming it (workers/resume.py).
    openai_stream: bool = False
    # The run's own webhook: its end is delivered there (hermes_queue/webhooks/).
    webhook: str = ""


class SideRecord(Protocol):
    """A record an endpoint keeps beside its run (a ``queued`` response): written once the
    turn is admitted and before its run exists, so no reader of the run finds it missing, and
    removed again when the run could not be created."""

    async def write(self, run_id: str, session_id: str) -> None: ...

    async def remove(self, run_id: str) -> None: ...


@dataclass(frozen=True)
class Enqueued:
    run_id: str
    # The session the turn runs on (a stored session's live tip).
    session_id: str
    # The script that created the run wrote this process's reader entry for it
    # (``runs/start.py``): the request that follows it need not write it again.
    reader_written: bool = False
    # The run record's ``created_at`` (unix seconds).
    created_at: float = 0.0


def with_trace(turn: NewTurn, carrier: dict[str, str]) -> NewTurn:
    """``turn`` carrying the trace context ``carrier`` (hermes_queue/tracing/)."""
    return dataclasses.replace(turn, request=dataclasses.replace(turn.request, trace=carrier))


def turn_headers(session_id: str, run_id: str, session_key: str | None) -> dict[str, str]:
    """The ``X-Hermes-*`` headers of an answer about a turn."""
    headers = {"X-Hermes-Session-Id": session_id, "X-Hermes-Run-Id": run_id}
    if session_key:
        headers["X-Hermes-Session-Key"] = session_key
    return headers


class TurnStarter:
    def __init__(
        self,
        runs: RunStarter,
        store: SessionStore,
        backpressure: Backpressure,
        default_model: str,
        tracing: Tracing | None = None,
        *,
        tenanted: bool = False,
    ) -> None:
        # Started with this process's readers of runs (streams/presence.py): the request
        # that starts a stored-session turn reads it (a completion, a session chat).
        self._runs = runs
        self._store = store
        self._backpressure = backpressure
        self._default_model = default_model
        # An enqueue span carrying the request's trace into the run, when tracing is on.
        self._tracing = tracing
        # The deployment has tenant keys: a session a client names by its id may be another
        # tenant's, which a turn must find missing (with one tenant, every session is its own).
        self._tenanted = tenanted

    async def enqueue_turn(
        self,
        turn: NewTurn,
        *,
        tenant: str,
        beside: SideRecord | None = None,
        created: Callable[[str], None] | None = None,
    ) -> Enqueued:
        """Admit, prepare and enqueue ``turn`` for ``tenant``, which owns the run (and a stored
        session the turn creates) (see the module docstring). ``created`` is told
        the run id as soon as the run exists (an ``Idempotency-Key`` record), even when the
        request then fails because too few replicas acknowledged it: the run stands on the
        primary, so a retry must find it rather than start a second one."""
        traced = self._tracing
        if traced is not None and turn.request.trace is None:
            # Under an enqueue span, the run carrying the request's trace context.
            return await traced.enqueue(
                lambda carrier: self.enqueue_turn(
                    with_trace(turn, carrier), tenant=tenant, beside=beside, created=created
                )
            )
        await self._backpressure.admit(tenant)
        run_id, session_id = await self._place(turn, tenant)
        if beside is not None:
            await beside.write(run_id, session_id)
        created_at = time.time()
        try:
            reader_written = await self._create(turn, run_id, session_id, tenant, created_at)
        except NotReplicated:
            if created is not None:
                created(run_id)
            raise
        except BaseException:
            if beside is not None:
                await beside.remove(run_id)
            raise
        if created is not None:
            created(run_id)
        return Enqueued(run_id, session_id, reader_written, created_at)

    async def _place(self, turn: NewTurn, tenant: str) -> tuple[str, str]:
        """The new run's id and the session it runs on. A run beside any other names its
        session after itself unless the client named one; a stored session's run is placed
        with its session (``runs/placement.py``)."""
        session = turn.session
        if isinstance(session, RunSession):
            # A persisted one is created on first use by the worker, with the turn's first
            # write (as upstream's agent creates it when the run starts): no SQL write here,
            # and one read only where another tenant may hold the id the client named (the
            # worker refuses to write into it anyway: workers/persistence.py).
            if session.persisted and session.session_id and self._tenanted:
                await self._not_anothers(session.session_id, tenant)
            run_id = self._runs.new_run_id()
            return run_id, session.session_id or run_id
        session_id = await self._stored_session(session, turn.selection, tenant)
        return self._runs.new_run_id(session_id), session_id

    async def _stored_session(
        self, session: StoredSession, selection: Selection, tenant: str
    ) -> str:
        """Prepare a stored session for its turn; its live tip, which the turn runs on."""
        if session.lock_row is not None and selection.persist_lock:
            await persist_lock(self._store, session.lock_row, selection)
        if session.create_missing:
            await self._create_missing(session.session_id, tenant)
        if session.lock_row is not None:
            return await tip_of(self._store, session.lock_row)
        return await self._store.resolve_tip(session.session_id)

    async def _not_anothers(self, session_id: str, tenant: str) -> None:
        row = await self._store.get_session(session_id)
        if row is not None and row.tenant != tenant:
            raise session_not_found(session_id)

    async def _create_missing(self, session_id: str, tenant: str) -> None:
        row = await self._store.get_session(session_id)
        if row is None:
            try:
                await self._store.create_session(session_id, tenant=tenant)
                return
            except SessionExists:  # a concurrent first turn created it
                row = await self._store.get_session(session_id)
        if row is not None and row.tenant != tenant:
            raise session_not_found(session_id)

    async def _create(
        self, turn: NewTurn, run_id: str, session_id: str, tenant: str, created_at: float
    ) -> bool:
        """Create the run; whether its script wrote this process's reader entry for it."""
        session = turn.session
        if isinstance(session, RunSession):
            persist = Persist.TURN if session.persisted else None
        else:
            persist = Persist.SESSION
        run = NewRun(
            run_id=run_id,
            session_id=session_id,
            request=turn.request,
            route=turn.selection,
            # What hermes.run reports: the model the client named, else the advertised name
            # (as upstream's run status); the resolved one is the route's.
            model=turn.named_model or self._default_model,
            persist=persist,
            openai_stream=turn.openai_stream,
            webhook=turn.webhook,
            tenant=tenant,
            created_at=created_at,
        )
        if isinstance(session, RunSession):
            await self._runs.start(run)
            return False
        admission = await self._runs.start_in_session(run, session.strategy)
        if admission.verdict == "busy":
            raise ApiError(
                409,
                "run_already_active",
                "This session already has a turn in progress",
                extra={"run_id": admission.blocking_run_id},
            )
        return admission.verdict != "exists" and self._runs.read_here
