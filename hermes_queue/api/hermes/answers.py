"""What the Hermes endpoints answer (runs, approvals, sessions, session chat, jobs), as models
for ``/openapi.json``; each frame model is the JSON of one SSE frame's ``data:`` line."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from hermes_queue.api.endpoint import AnswerModel


class RunStarted(AnswerModel):
    run_id: str
    status: str
    replayed: bool | None = Field(default=None, description="Present with an Idempotency-Key.")


class RunStatus(AnswerModel):
    """``hermes.run`` (upstream-api.md §4.2)."""

    object: Literal["hermes.run"]
    run_id: str
    status: str
    session_id: str | None = None
    trace_id: str | None = Field(
        default=None,
        description="The turn's OpenTelemetry trace id (32 hex), when the API traces.",
    )
    pending_steer: str | None = Field(
        default=None,
        description="A completed run's steers its agent never applied (newline-joined).",
    )


class RunStopping(AnswerModel):
    run_id: str
    status: str


class ApprovalAnswer(AnswerModel):
    object: Literal["hermes.run.approval_response"]
    run_id: str
    choice: str
    resolved: int


class SteerAccepted(AnswerModel):
    object: Literal["hermes.run.steer"]
    run_id: str
    accepted: bool


class Session(AnswerModel):
    id: str
    title: str | None = None


class SessionEnvelope(AnswerModel):
    object: Literal["hermes.session"]
    session: Session


class SessionList(AnswerModel):
    object: Literal["list"]
    data: list[Session]
    limit: int
    offset: int
    has_more: bool


class SessionDeleted(AnswerModel):
    object: Literal["hermes.session.deleted"]
    id: str
    deleted: bool


class MessageList(AnswerModel):
    object: Literal["list"]
    session_id: str
    data: list[dict[str, Any]]


class SessionRunList(AnswerModel):
    """``GET /api/sessions/{id}/runs``: the active turn first, then those queued behind it."""

    object: Literal["list"]
    session_id: str
    data: list[RunStatus]


class ModelLock(AnswerModel):
    object: Literal["hermes.session.model_lock"]
    session_id: str
    runtime: dict[str, Any]


class SessionChatCompletion(AnswerModel):
    object: Literal["hermes.session.chat.completion"]
    session_id: str
    message: dict[str, Any]
    usage: dict[str, Any]


class JobEnvelope(AnswerModel):
    job: dict[str, Any]


class JobList(AnswerModel):
    jobs: list[dict[str, Any]]


class Ok(AnswerModel):
    ok: bool


class JobsError(BaseModel):
    """The jobs API's own envelope (upstream's), for its refusals, 404s and store failures."""

    error: str


class RunsEvent(AnswerModel):
    """``/v1/runs/{id}/events`` (upstream-api.md §3.3): unnamed frames, then ``: stream closed``."""

    event: str = Field(
        description="message.delta, reasoning.available, tool.started, tool.completed, "
        "approval.request, approval.responded, subagent.start, subagent.complete, "
        "run.steered, run.restarted, run.resumed, stream.gap, run.completed, run.failed, "
        "run.cancelled"
    )
    run_id: str
    timestamp: float


class SessionStreamEvent(AnswerModel):
    """The session chat stream (upstream-api.md §3.1): ``event:`` names the type."""

    session_id: str
    run_id: str
    seq: int
    ts: float
