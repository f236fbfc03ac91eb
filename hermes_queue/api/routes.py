"""Every route the API serves, in one table: find an endpoint here, then follow its handler.

Handlers are grouped by resource, one module each. Discovery (``/v1/capabilities``) reads the
router this table fills, so adding a row is all it takes to advertise an endpoint.
"""

from __future__ import annotations

from aiohttp import web

from hermes_queue.api import openapi
from hermes_queue.api.hermes import approvals, jobs, runs, session_chat, sessions
from hermes_queue.api.openai import chat_completions, responses
from hermes_queue.api.ops import dashboard, discovery, operations, skills, unsupported

SERVED: list[web.RouteDef] = [
    web.get("/health", discovery.health),
    web.get("/v1/health", discovery.health),
    web.get("/openapi.json", openapi.openapi_json),
    # Runs: start a turn, poll it, follow its events, stop it, answer its approvals.
    web.post("/v1/runs", runs.start_run),
    web.get("/v1/runs/{run_id}", runs.get_run),
    web.get("/v1/runs/{run_id}/events", runs.run_events),
    web.post("/v1/runs/{run_id}/stop", runs.stop_run),
    web.post("/v1/runs/{run_id}/approval", approvals.answer_approval),
    # Sessions in the SQL store, and their chat (each turn a run).
    web.get("/api/sessions", sessions.list_sessions),
    web.post("/api/sessions", sessions.create_session),
    web.get("/api/sessions/{session_id}", sessions.get_session),
    web.patch("/api/sessions/{session_id}", sessions.update_session),
    web.delete("/api/sessions/{session_id}", sessions.delete_session),
    web.get("/api/sessions/{session_id}/messages", sessions.list_messages),
    web.post("/api/sessions/{session_id}/fork", sessions.fork_session),
    web.post("/api/sessions/{session_id}/model", sessions.set_model_lock),
    web.post("/api/sessions/{session_id}/chat", session_chat.chat),
    web.post("/api/sessions/{session_id}/chat/stream", session_chat.chat_stream),
    web.get("/api/sessions/{session_id}/chat/stream", session_chat.resume_stream),
    # Discovery (upstream-api.md §5) and what the workers' backend offers.
    web.get("/v1/capabilities", discovery.capabilities),
    web.get("/v1/models", discovery.models),
    web.get("/health/detailed", discovery.health_detailed),
    web.get("/v1/skills", skills.skills),
    web.get("/v1/toolsets", skills.toolsets),
    # The OpenAI dialects, each completion or response a run.
    web.post("/v1/chat/completions", chat_completions.chat_completions),
    web.post("/v1/responses", responses.create_response),
    web.get("/v1/responses/{response_id}", responses.get_response),
    web.delete("/v1/responses/{response_id}", responses.delete_response),
    # Scheduled jobs (upstream's cron admin), fired by the workers.
    web.get("/api/jobs", jobs.list_jobs),
    web.post("/api/jobs", jobs.create_job),
    web.get("/api/jobs/{job_id}", jobs.get_job),
    web.patch("/api/jobs/{job_id}", jobs.update_job),
    web.delete("/api/jobs/{job_id}", jobs.delete_job),
    web.post("/api/jobs/{job_id}/pause", jobs.pause_job),
    web.post("/api/jobs/{job_id}/resume", jobs.resume_job),
    web.post("/api/jobs/{job_id}/run", jobs.run_job),
    # Operations: metrics, the queue, the operator's dashboard.
    web.get("/metrics", operations.metrics),
    web.get("/v1/queue", operations.queue),
    web.get("/v1/queue/stream", operations.queue_stream),
    *[web.get(path, dashboard.serve_asset) for path in dashboard.ASSETS],
]

# Upstream endpoints not provided here answer 501 (``unsupported.py``); a row above wins.
ROUTES: list[web.RouteDef] = [*SERVED, *unsupported.placeholders(SERVED)]
