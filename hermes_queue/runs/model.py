"""The run record and its states, as stored in the run's Redis hash and shown as ``hermes.run``:
written at creation from a :class:`NewRun` (its fields, one encoding), read back as a
:class:`RunRecord`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from hermes_queue.routing import Selection
from hermes_queue.runs.steers import PendingSteer, decode_steers
from hermes_queue.runs.trace_context import trace_id_of
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.tenancy.keys import DEFAULT_TENANT


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    STOPPING = "stopping"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class FailReason(StrEnum):
    """Why a run failed: the ``reason`` of its record, ``run.failed`` event and status."""

    AGENT_ERROR = "agent_error"  # the backend reported an error (AgentError)
    PROVIDER_AUTH = "provider_auth"  # no key, or the provider refused it (upstream-api.md §6.4)
    LOCK_MISMATCH = "lock_mismatch"  # the turn ran off the session's confirmed model lock
    SESSION_DB_UNAVAILABLE = "session_db_unavailable"  # the SQL session store failed
    REDIS = "redis"  # Redis stayed unreachable while the turn published its events
    # The run spent its execution_policy's run_budget_seconds (checked at each step boundary).
    RUN_BUDGET = "run_budget_exceeded"
    TIMEOUT = "timeout"  # the turn ran past job_timeout_seconds
    INTERNAL = "internal"  # a bug in the worker
    WORKER_LOST = "worker_lost"  # its workers kept dying (reap.lua, after max_attempts)


# How long an accepted run may wait in the queue: its record lives this long beyond its
# retention, so a run that waited this long still has a record when a worker takes it.
QUEUE_WAIT_SECONDS = 86_400

TERMINAL_STATUSES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
ACTIVE_STATUSES = frozenset({RunStatus.RUNNING, RunStatus.STOPPING, RunStatus.WAITING_FOR_APPROVAL})


def _text(raw: dict[bytes | str, Any], name: str) -> str:
    value = raw.get(name.encode(), raw.get(name))
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def _json(text: str, default: Any) -> Any:
    return json.loads(text) if text else default


def _pending_approval(raw: dict[Any, Any]) -> dict[str, Any] | None:
    """The oldest pending request (fields named in runs/lua/approval_prelude.lua)."""
    pending = _text(raw, "approvals_pending").split()
    if not pending:
        return None
    data = _json(_text(raw, f"approval:{pending[0]}"), None)
    return data if isinstance(data, dict) else None


class Persist(StrEnum):
    """A run record's ``persist``: what the worker writes to the SQL store (absent: nothing)."""

    # The turn is appended to its session's stored transcript, which is also the turn's
    # history (a stored session's turn: session chat, chat completions with
    # X-Hermes-Session-Id, scheduled jobs).
    SESSION = "1"
    # The turn is appended to its session, whose history the request carries (a /v1/runs turn,
    # saved as upstream's agent saves its turns).
    TURN = "turn"


def _persist(text: str) -> Persist | None:
    try:
        return Persist(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class NewRun:
    """A run about to be created (``runs/start.py``): what its record holds from the start."""

    run_id: str
    # The session it runs on (a stored session's live tip; else the client's, or the run id).
    session_id: str
    request: TurnRequest
    # Its runtime, decided on the API side (or the scheduler's); never credentials.
    route: Selection = field(default_factory=Selection)
    # What ``hermes.run`` reports as its model.
    model: str = ""
    persist: Persist | None = None
    # Its client reads it as an OpenAI stream, which cannot take back text it was shown: a
    # worker lost mid-text then ends the run rather than resuming it (workers/resume.py).
    openai_stream: bool = False
    # The run's own webhook (an absolute http(s) URL, checked at admission): its terminal
    # status is delivered there (hermes_queue/webhooks/).
    webhook: str = ""
    # The tenant that started it (tenancy/keys.py): the only one that sees, follows, stops, steers
    # or answers it.
    tenant: str = DEFAULT_TENANT
    # When it was made (unix seconds): its record's ``created_at``, known to its starter without
    # reading the record back.
    created_at: float = field(default_factory=time.time)

    def fields(self) -> dict[str, str]:
        """The record's fields at creation, as the create scripts write them (``RunRecord``
        reads them back)."""
        now = repr(self.created_at)
        fields = {
            "run_id": self.run_id,
            "session_id": self.session_id,
            "status": RunStatus.QUEUED,
            "attempt": "0",
            "seq": "0",
            "created_at": now,
            "updated_at": now,
            "model": self.model,
            "request": json.dumps(self.request.to_json(), ensure_ascii=False),
            "route": json.dumps(self.route.as_dict()),
            "tenant": self.tenant,
        }
        if self.persist is not None:
            fields["persist"] = self.persist.value
        if self.openai_stream:
            fields["openai_stream"] = "1"
        if self.webhook:
            fields["webhook"] = self.webhook
        return fields


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    session_id: str
    status: str
    attempt: int = 0
    # Events written so far (by every attempt).
    seq: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    model: str = ""
    last_event: str = ""
    output: str | None = None
    usage: dict[str, Any] | None = None
    error: str | None = None
    reason: str | None = None
    worker: str = ""
    # What the worker writes to the SQL store (``Persist``), None: nothing.
    persist: Persist | None = None
    # The turn as accepted by the API.
    request: TurnRequest = field(default_factory=TurnRequest)
    # The resolved route (provider/model/route_source...); never credentials.
    route: Selection = field(default_factory=Selection)
    # The oldest pending approval request (its approval.request data) while one is pending.
    approval: dict[str, Any] | None = None
    # Agent steps recorded so far (keys.steps), and the id of the last event before the last
    # one: what a resumed attempt says is still valid (run.resumed).
    steps: int = 0
    step_event: str = ""
    # The client that started the run reads it as an OpenAI stream (chat completions,
    # Responses): it cannot take back text it was shown (workers/turn.py, resuming).
    openai_stream: bool = False
    # Attempts that ended with their worker lost (reap.lua): why a later attempt exists.
    lost: int = 0
    # The run's own webhook URL ("": none).
    webhook: str = ""
    # The outbox its end queues webhook deliveries in ("": it wants none): its own webhook, or
    # the deployment's subscriptions when it was created.
    webhook_outbox: str = ""
    # When its first attempt was claimed (unix seconds; 0 before): where its run budget starts,
    # the time it waited in the queue left out.
    first_started_at: float = 0.0
    # Steers accepted and not yet applied (runs/steers.py), oldest first.
    pending_steers: tuple[PendingSteer, ...] = ()
    # A completed run's steers that were never applied (upstream's ``pending_steer``).
    pending_steer: str | None = None
    # Its owner (a record written before tenants: the default tenant).
    tenant: str = DEFAULT_TENANT

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def history_from_store(self) -> bool:
        """The worker reads the turn's history from its stored session."""
        return self.persist is Persist.SESSION

    @classmethod
    def from_hash(cls, raw: dict[Any, Any]) -> RunRecord:
        return cls(
            run_id=_text(raw, "run_id"),
            session_id=_text(raw, "session_id"),
            status=_text(raw, "status"),
            attempt=int(_text(raw, "attempt") or 0),
            seq=int(_text(raw, "seq") or 0),
            created_at=float(_text(raw, "created_at") or 0),
            updated_at=float(_text(raw, "updated_at") or 0),
            model=_text(raw, "model"),
            last_event=_text(raw, "last_event"),
            output=_text(raw, "output") if _text(raw, "status") == RunStatus.COMPLETED else None,
            usage=_json(_text(raw, "usage"), None),
            error=_text(raw, "error") or None,
            reason=_text(raw, "reason") or None,
            worker=_text(raw, "worker"),
            persist=_persist(_text(raw, "persist")),
            request=TurnRequest.from_json(_json(_text(raw, "request"), {})),
            route=Selection.from_dict(_json(_text(raw, "route"), {})),
            approval=_pending_approval(raw),
            steps=int(_text(raw, "steps") or 0),
            step_event=_text(raw, "step_event"),
            openai_stream=_text(raw, "openai_stream") == "1",
            lost=int(_text(raw, "lost") or 0),
            webhook=_text(raw, "webhook"),
            webhook_outbox=_text(raw, "webhook_outbox"),
            first_started_at=float(_text(raw, "first_started_at") or _text(raw, "started_at") or 0),
            pending_steers=decode_steers(_text(raw, "steers_pending")),
            pending_steer=_text(raw, "pending_steer") or None,
            tenant=_text(raw, "tenant") or DEFAULT_TENANT,
        )

    def to_status(self) -> dict[str, Any]:
        """The upstream ``hermes.run`` object (upstream-api.md §4.2), plus ``attempt``."""
        body: dict[str, Any] = {
            "object": "hermes.run",
            "run_id": self.run_id,
            "status": self.status,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "session_id": self.session_id,
            "model": self.model,
            "last_event": self.last_event or None,
            "attempt": self.attempt,
        }
        if self.status == RunStatus.COMPLETED:
            body["output"] = self.output or ""
            body["usage"] = self.usage or {}
        if self.status == RunStatus.WAITING_FOR_APPROVAL and self.approval is not None:
            body["approval"] = self.approval  # VN: the request a client is asked to answer
        if self.pending_steer is not None:
            body["pending_steer"] = self.pending_steer  # VN: steers the agent never applied
        if self.status == RunStatus.FAILED:
            body["error"] = self.error or "run failed"
            if self.reason:
                body["reason"] = self.reason
        if (trace_id := trace_id_of(self.request.trace)) is not None:
            body["trace_id"] = trace_id  # VN: the OpenTelemetry trace of the turn
        return body
