"""What ``/openapi.json`` says about each handler beyond its route: the body and query models it
validates with, the headers it reads, what it answers. ``openapi.py`` walks the route table and
looks every handler up here; a routed handler missing here fails ``tests/api/test_openapi.py``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from hermes_queue.api import request_models as body
from hermes_queue.api import resource_models as resource
from hermes_queue.api import response_schemas as out
from hermes_queue.api.hermes import approvals, jobs, runs, session_chat, sessions
from hermes_queue.api.http import queries as query
from hermes_queue.api.openai import chat_completions, responses
from hermes_queue.api.ops import dashboard, discovery, operations, skills

JSON = "application/json"
SSE = "text/event-stream"


@dataclass(frozen=True)
class Answer:
    """One response: its description, the model of its JSON body (or of each SSE frame's data)
    and its media type."""

    description: str
    model: type[BaseModel] | None = None
    media: str = JSON


@dataclass(frozen=True)
class Operation:
    summary: str
    tag: str
    answers: dict[int, Answer]
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    headers: tuple[str, ...] = ()
    public: bool = False
    starts_turn: bool = False  # 429 queue_full, 503 gateway_draining
    jobs_envelope: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def ok(model: type[BaseModel] | None, description: str = "OK") -> dict[int, Answer]:
    return {200: Answer(description, model)}


def stream(model: type[BaseModel], description: str) -> Answer:
    return Answer(description, model, SSE)


TURN_HEADERS = ("X-Hermes-Session-Key",)
Handler = Callable[..., Any]


def _runs_operations() -> dict[Handler, Operation]:
    """``/v1/runs``: start, poll, follow, stop, approvals."""
    sse_runs = stream(out.RunsEvent, "Server-sent events in upstream's runs dialect.")
    return {
        runs.start_run: Operation(
            "Start a run",
            "runs",
            {202: Answer("Queued", out.RunStarted)},
            body=body.RunBody,
            headers=("Idempotency-Key",),
            starts_turn=True,
        ),
        runs.get_run: Operation("A run's status", "runs", ok(out.RunStatus)),
        runs.run_events: Operation(
            "Follow a run's events",
            "runs",
            {200: sse_runs},
            query=query.EventsQuery,
            headers=("Last-Event-ID",),
        ),
        runs.stop_run: Operation(
            "Stop a run", "runs", {200: Answer("Stopping, or the finished run", out.RunStopping)}
        ),
        approvals.answer_approval: Operation(
            "Answer an approval request", "runs", ok(out.ApprovalAnswer), body=resource.ApprovalBody
        ),
    }


def _sessions_operations() -> dict[Handler, Operation]:
    """Sessions, their transcripts and chat."""
    sse_session = stream(
        out.SessionStreamEvent, "Server-sent events in upstream's session dialect."
    )
    return {
        sessions.list_sessions: Operation(
            "List sessions", "sessions", ok(out.SessionList), query=query.SessionListQuery
        ),
        sessions.create_session: Operation(
            "Create a session",
            "sessions",
            {201: Answer("Created", out.SessionEnvelope)},
            body=resource.SessionCreateBody,
        ),
        sessions.get_session: Operation("A session", "sessions", ok(out.SessionEnvelope)),
        sessions.update_session: Operation(
            "Update a session", "sessions", ok(out.SessionEnvelope), body=resource.SessionPatchBody
        ),
        sessions.delete_session: Operation("Delete a session", "sessions", ok(out.SessionDeleted)),
        sessions.list_messages: Operation(
            "A session's transcript", "sessions", ok(out.MessageList), query=query.MessageListQuery
        ),
        sessions.fork_session: Operation(
            "Fork a session",
            "sessions",
            {201: Answer("The fork", out.SessionEnvelope)},
            body=resource.ForkBody,
        ),
        sessions.set_model_lock: Operation(
            "Lock a session's model", "sessions", ok(out.ModelLock), body=resource.ModelLockBody
        ),
        session_chat.chat: Operation(
            "One chat turn",
            "sessions",
            ok(out.SessionChatCompletion),
            body=body.SessionChatBody,
            headers=TURN_HEADERS,
            starts_turn=True,
        ),
        session_chat.chat_stream: Operation(
            "One chat turn, streamed",
            "sessions",
            {200: sse_session},
            body=body.SessionChatBody,
            headers=TURN_HEADERS,
            starts_turn=True,
        ),
        session_chat.resume_stream: Operation(
            "Follow a session turn again",
            "sessions",
            {200: sse_session},
            query=query.ResumeQuery,
            headers=("Last-Event-ID",),
        ),
    }


def _discovery_operations() -> dict[Handler, Operation]:
    """Health, capabilities, models, skills and toolsets."""
    return {
        discovery.health: Operation("Liveness", "discovery", ok(out.Health), public=True),
        discovery.capabilities: Operation("Capabilities", "discovery", ok(out.Capabilities)),
        discovery.models: Operation("Models", "discovery", ok(out.ObjectList)),
        discovery.health_detailed: Operation("Readiness", "discovery", ok(out.HealthDetailed)),
        skills.skills: Operation("Skills", "discovery", ok(out.ObjectList)),
        skills.toolsets: Operation("Toolsets", "discovery", ok(out.ObjectList)),
    }


def _openai_operations() -> dict[Handler, Operation]:
    """The OpenAI dialects."""
    return {
        chat_completions.chat_completions: Operation(
            "OpenAI chat completion",
            "openai",
            {
                200: Answer(
                    "A chat.completion, or with stream chat.completion.chunk frames then "
                    "data: [DONE]",
                    out.ChatCompletion,
                ),
                502: Answer("The turn failed with no text", out.ErrorEnvelope),
            },
            body=body.ChatCompletionBody,
            headers=(
                "X-Hermes-Session-Id",
                "X-Hermes-Session-Key",
                "Idempotency-Key",
                "X-Hermes-Cancel-On-Disconnect",
            ),
            starts_turn=True,
            extra={"stream": stream(out.ChatCompletionChunk, "With stream: chunks")},
        ),
        responses.create_response: Operation(
            "OpenAI response",
            "openai",
            ok(out.ResponseObject, "A response object, or with stream its events"),
            body=body.ResponseBody,
            headers=("X-Hermes-Session-Key", "Idempotency-Key"),
            starts_turn=True,
            extra={"stream": stream(out.ResponseStreamEvent, "With stream: events")},
        ),
        responses.get_response: Operation(
            "A stored response",
            "openai",
            ok(out.ResponseObject, "The response, or with stream its events again"),
            query=query.ResponseGetQuery,
            extra={"stream": stream(out.ResponseStreamEvent, "With stream: events")},
        ),
        responses.delete_response: Operation(
            "Delete a stored response", "openai", ok(out.ResponseDeleted)
        ),
    }


def _jobs_operations() -> dict[Handler, Operation]:
    """Scheduled jobs (the jobs API's own error envelope)."""
    return {
        jobs.list_jobs: Operation(
            "List jobs", "jobs", ok(out.JobList), query=query.JobListQuery, jobs_envelope=True
        ),
        jobs.create_job: Operation(
            "Create a job",
            "jobs",
            ok(out.JobEnvelope),
            body=resource.JobCreateBody,
            jobs_envelope=True,
        ),
        jobs.get_job: Operation("A job", "jobs", ok(out.JobEnvelope), jobs_envelope=True),
        jobs.update_job: Operation(
            "Update a job",
            "jobs",
            ok(out.JobEnvelope),
            body=resource.JobPatchBody,
            jobs_envelope=True,
        ),
        jobs.delete_job: Operation("Delete a job", "jobs", ok(out.Ok), jobs_envelope=True),
        jobs.pause_job: Operation("Pause a job", "jobs", ok(out.JobEnvelope), jobs_envelope=True),
        jobs.resume_job: Operation("Resume a job", "jobs", ok(out.JobEnvelope), jobs_envelope=True),
        jobs.run_job: Operation(
            "Run a job now", "jobs", ok(out.JobEnvelope), jobs_envelope=True, starts_turn=True
        ),
    }


def _operator_operations() -> dict[Handler, Operation]:
    """Metrics, the queue and the dashboard."""
    return {
        operations.metrics: Operation(
            "Prometheus metrics", "operations", {200: Answer("Prometheus text", None, "text/plain")}
        ),
        operations.queue: Operation(
            "Queue snapshot", "operations", ok(out.Queue), query=query.QueuePageQuery
        ),
        operations.queue_stream: Operation(
            "Queue snapshots",
            "operations",
            {200: stream(out.QueueSnapshot, "event: queue frames")},
            query=query.QueuePageQuery,
        ),
        dashboard.serve_asset: Operation(
            "The dashboard",
            "operations",
            {200: Answer("A page or asset", None, "text/html")},
            public=True,
        ),
    }


def operations_by_handler() -> dict[Handler, Operation]:
    """Every served handler's operation."""
    return {
        **_runs_operations(),
        **_sessions_operations(),
        **_discovery_operations(),
        **_openai_operations(),
        **_jobs_operations(),
        **_operator_operations(),
    }
