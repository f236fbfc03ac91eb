"""What the API answers, as pydantic models, for ``/openapi.json`` only (the renderers build
these bodies; ``tests/api/test_openapi.py`` checks real answers against them). Every model
accepts keys it does not list: answers carry extensions beyond what is pinned here."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorBody(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, gateway_auth_error, server_error, …")
    param: str | None = Field(description="The offending field or header, when known.")
    code: str | None = Field(description="Machine-readable reason, e.g. missing_input.")
    model_config = ConfigDict(extra="allow")


class ErrorEnvelope(BaseModel):
    """Every refusal and failure (upstream-api.md §1.3); some add keys beside the four."""

    error: ErrorBody


class JobsError(BaseModel):
    """The jobs API's own envelope (upstream's), for its refusals, 404s and store failures."""

    error: str


class Health(_Open):
    status: Literal["ok"]
    platform: str
    version: str


class HealthDetailed(_Open):
    status: Literal["ok", "degraded"]
    readiness: dict[str, Any]
    warnings: list[str] = Field(description="E.g. that the API has no key.")


class RunStarted(_Open):
    run_id: str
    status: str
    replayed: bool | None = Field(default=None, description="Present with an Idempotency-Key.")


class RunStatus(_Open):
    """``hermes.run`` (upstream-api.md §4.2)."""

    object: Literal["hermes.run"]
    run_id: str
    status: str
    session_id: str | None = None


class RunStopping(_Open):
    run_id: str
    status: str


class ApprovalAnswer(_Open):
    object: Literal["hermes.run.approval_response"]
    run_id: str
    choice: str
    resolved: int


class Session(_Open):
    id: str
    title: str | None = None


class SessionEnvelope(_Open):
    object: Literal["hermes.session"]
    session: Session


class SessionList(_Open):
    object: Literal["list"]
    data: list[Session]
    limit: int
    offset: int
    has_more: bool


class SessionDeleted(_Open):
    object: Literal["hermes.session.deleted"]
    id: str
    deleted: bool


class MessageList(_Open):
    object: Literal["list"]
    session_id: str
    data: list[dict[str, Any]]


class ModelLock(_Open):
    object: Literal["hermes.session.model_lock"]
    session_id: str
    runtime: dict[str, Any]


class SessionChatCompletion(_Open):
    object: Literal["hermes.session.chat.completion"]
    session_id: str
    message: dict[str, Any]
    usage: dict[str, Any]


class ChatCompletion(_Open):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[dict[str, Any]]


class ResponseObject(_Open):
    id: str
    object: Literal["response"]
    status: str


class ResponseDeleted(_Open):
    id: str
    object: Literal["response"]
    deleted: bool


class ObjectList(_Open):
    object: Literal["list"]
    data: list[dict[str, Any]]


class Capabilities(_Open):
    object: Literal["hermes.api_server.capabilities"]
    endpoints: dict[str, Any]
    features: dict[str, Any]


class Queue(_Open):
    object: Literal["hermes.queue"]


class JobEnvelope(_Open):
    job: dict[str, Any]


class JobList(_Open):
    jobs: list[dict[str, Any]]


class Ok(_Open):
    ok: bool


# -- server-sent events: the JSON in each frame's data: line ----------------------------------


class RunsEvent(_Open):
    """``/v1/runs/{id}/events`` (upstream-api.md §3.3): unnamed frames, then ``: stream closed``."""

    event: str = Field(
        description="message.delta, reasoning.available, tool.started, tool.completed, "
        "approval.request, approval.responded, subagent.start, subagent.complete, "
        "run.restarted, stream.gap, run.completed, run.failed, run.cancelled"
    )
    run_id: str
    timestamp: float


class SessionStreamEvent(_Open):
    """The session chat stream (upstream-api.md §3.1): ``event:`` names the type."""

    session_id: str
    run_id: str
    seq: int
    ts: float


class ChatCompletionChunk(_Open):
    """A ``chat.completion.chunk``; ``data: [DONE]`` ends the stream, and ``event:
    hermes.tool.progress`` frames carry ``{tool, emoji, label, toolCallId, status}``."""

    object: Literal["chat.completion.chunk"] | None = None
    choices: list[dict[str, Any]] | None = None


class ResponseStreamEvent(_Open):
    """A Responses stream event (upstream-api.md §3.4): ``type`` is the event name."""

    type: str
    sequence_number: int


class QueueSnapshot(_Open):
    """``event: queue`` frames of ``/v1/queue/stream``: the ``hermes.queue`` snapshot."""

    object: Literal["hermes.queue"]
