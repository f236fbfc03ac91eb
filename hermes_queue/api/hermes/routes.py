"""The Hermes dialect's route rows: runs and their approvals, sessions and their chat, scheduled
jobs. Each row is the route and what ``/openapi.json`` says of it (``api/endpoint.py``)."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from hermes_queue.api.endpoint import Answer, Endpoint, Handler, ok, stream
from hermes_queue.api.hermes import answers as out
from hermes_queue.api.hermes import (
    approvals,
    job_bodies,
    jobs,
    run_bodies,
    runs,
    session_bodies,
    session_chat,
    sessions,
    steer,
)

TURN_HEADERS = ("X-Hermes-Session-Key",)
RUNS_STREAM = stream(out.RunsEvent, "Server-sent events in upstream's runs dialect.")
SESSION_STREAM = stream(out.SessionStreamEvent, "Server-sent events in upstream's session dialect.")

# Start a turn, poll it, follow its events, stop it, answer its approvals, steer it.
RUNS = [
    Endpoint(
        "POST",
        "/v1/runs",
        runs.start_run,
        "Start a run",
        "runs",
        {202: Answer("Queued", out.RunStarted)},
        body=run_bodies.RunBody,
        headers=("Idempotency-Key",),
        starts_turn=True,
    ),
    Endpoint("GET", "/v1/runs/{run_id}", runs.get_run, "A run's status", "runs", ok(out.RunStatus)),
    Endpoint(
        "GET",
        "/v1/runs/{run_id}/events",
        runs.run_events,
        "Follow a run's events",
        "runs",
        {200: RUNS_STREAM},
        query=run_bodies.EventsQuery,
        headers=("Last-Event-ID",),
    ),
    Endpoint(
        "POST",
        "/v1/runs/{run_id}/stop",
        runs.stop_run,
        "Stop a run",
        "runs",
        {200: Answer("Stopping, or the finished run", out.RunStopping)},
    ),
    Endpoint(
        "POST",
        "/v1/runs/{run_id}/approval",
        approvals.answer_approval,
        "Answer an approval request",
        "runs",
        ok(out.ApprovalAnswer),
        body=run_bodies.ApprovalBody,
    ),
    Endpoint(
        "POST",
        "/v1/runs/{run_id}/steer",
        steer.steer_run,
        "Steer a running run",
        "runs",
        ok(out.SteerAccepted),
        body=run_bodies.SteerBody,
    ),
]

# Sessions in the SQL store, and their chat (each turn a run).
SESSIONS = [
    Endpoint(
        "GET",
        "/api/sessions",
        sessions.list_sessions,
        "List sessions",
        "sessions",
        ok(out.SessionList),
        query=session_bodies.SessionListQuery,
    ),
    Endpoint(
        "POST",
        "/api/sessions",
        sessions.create_session,
        "Create a session",
        "sessions",
        {201: Answer("Created", out.SessionEnvelope)},
        body=session_bodies.SessionCreateBody,
        body_optional=True,
    ),
    Endpoint(
        "GET",
        "/api/sessions/{session_id}",
        sessions.get_session,
        "A session",
        "sessions",
        ok(out.SessionEnvelope),
    ),
    Endpoint(
        "PATCH",
        "/api/sessions/{session_id}",
        sessions.update_session,
        "Update a session",
        "sessions",
        ok(out.SessionEnvelope),
        body=session_bodies.SessionPatchBody,
    ),
    Endpoint(
        "DELETE",
        "/api/sessions/{session_id}",
        sessions.delete_session,
        "Delete a session",
        "sessions",
        ok(out.SessionDeleted),
    ),
    Endpoint(
        "GET",
        "/api/sessions/{session_id}/messages",
        sessions.list_messages,
        "A session's transcript",
        "sessions",
        ok(out.MessageList),
        query=session_bodies.MessageListQuery,
    ),
    Endpoint(
        "GET",
        "/api/sessions/{session_id}/runs",
        sessions.list_session_runs,
        "A session's active and queued turns",
        "sessions",
        ok(out.SessionRunList),
    ),
    Endpoint(
        "POST",
        "/api/sessions/{session_id}/fork",
        sessions.fork_session,
        "Fork a session",
        "sessions",
        {201: Answer("The fork", out.SessionEnvelope)},
        body=session_bodies.ForkBody,
        body_optional=True,
    ),
    Endpoint(
        "POST",
        "/api/sessions/{session_id}/model",
        sessions.set_model_lock,
        "Lock a session's model",
        "sessions",
        ok(out.ModelLock),
        body=session_bodies.ModelLockBody,
    ),
    Endpoint(
        "POST",
        "/api/sessions/{session_id}/chat",
        session_chat.chat,
        "One chat turn",
        "sessions",
        ok(out.SessionChatCompletion),
        body=session_bodies.SessionChatBody,
        headers=TURN_HEADERS,
        starts_turn=True,
    ),
    Endpoint(
        "POST",
        "/api/sessions/{session_id}/chat/stream",
        session_chat.chat_stream,
        "One chat turn, streamed",
        "sessions",
        {200: SESSION_STREAM},
        body=session_bodies.SessionChatBody,
        headers=TURN_HEADERS,
        starts_turn=True,
    ),
    Endpoint(
        "GET",
        "/api/sessions/{session_id}/chat/stream",
        session_chat.resume_stream,
        "Follow a session turn again",
        "sessions",
        {200: SESSION_STREAM},
        query=session_bodies.ResumeQuery,
        headers=("Last-Event-ID",),
    ),
]


def _job(
    method: str,
    path: str,
    handler: Handler,
    summary: str,
    answers: Mapping[int, Answer] | None = None,
    *,
    body: type[BaseModel] | None = None,
    query: type[BaseModel] | None = None,
    starts_turn: bool = False,
) -> Endpoint:
    """A jobs API row: it answers a job by default, and refuses in the jobs API's own envelope
    as well as the standard one."""
    return Endpoint(
        method,
        path,
        handler,
        summary,
        "jobs",
        answers or ok(out.JobEnvelope),
        body=body,
        query=query,
        starts_turn=starts_turn,
        errors=out.JobsError,
    )


# Scheduled jobs (upstream's cron admin), fired by the workers.
JOBS = [
    _job(
        "GET",
        "/api/jobs",
        jobs.list_jobs,
        "List jobs",
        ok(out.JobList),
        query=job_bodies.JobListQuery,
    ),
    _job("POST", "/api/jobs", jobs.create_job, "Create a job", body=job_bodies.JobCreateBody),
    _job("GET", "/api/jobs/{job_id}", jobs.get_job, "A job"),
    _job(
        "PATCH", "/api/jobs/{job_id}", jobs.update_job, "Update a job", body=job_bodies.JobPatchBody
    ),
    _job("DELETE", "/api/jobs/{job_id}", jobs.delete_job, "Delete a job", ok(out.Ok)),
    _job("POST", "/api/jobs/{job_id}/pause", jobs.pause_job, "Pause a job"),
    _job("POST", "/api/jobs/{job_id}/resume", jobs.resume_job, "Resume a job"),
    _job("POST", "/api/jobs/{job_id}/run", jobs.run_job, "Run a job now", starts_turn=True),
]

ENDPOINTS = [*RUNS, *SESSIONS, *JOBS]
