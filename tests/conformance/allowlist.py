"""THE allowlist: every deliberate difference from upstream 0.19's answers, and nothing else.

Each entry names its row in docs/compatibility.md (the start of the row's first cell) and why
the difference is right. An entry does not ignore a difference: its reconciler checks that our
answer shows exactly the documented behaviour (reported as a difference when it does not), then
removes that one difference from both answers, so everything else is still compared. Where
upstream versions differ, hermes-queue follows the lock-era version (VL) its clients expect, or
VN where it fixed a V19 quirk; those entries say so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tests.conformance.compare import Difference
from tests.conformance.exchange import Exchange
from tests.conformance.reconcile import (
    Pair,
    _agent_snapshots,
    _auth_401,
    _chat_reasoning,
    _create_lock,
    _error_details,
    _fork_marker,
    _fork_redirect,
    _health_version,
    _jobs_capabilities,
    _key_setting,
    _lock_capabilities,
    _pagination,
    _queue_capabilities,
    _run_fields,
    _runtime,
    _session_model,
    _sse_ids,
    _steer_capabilities,
    _stop_finished,
)
from tests.conformance.reconcile_turns import (
    _failed_turn,
    _provider_auth,
    _responses_order,
    _responses_shape,
)


@dataclass(frozen=True)
class Allowed:
    key: str
    row: str  # how the docs/compatibility.md row's first cell starts
    why: str
    reconcile: Callable[[Pair], None]


def _fork(pair: Pair) -> None:
    _fork_marker(pair)
    _fork_redirect(pair)


ALLOWLIST: tuple[Allowed, ...] = (
    # Whole-exchange entries first: they replace an answer the others would otherwise inspect.
    Allowed(
        "vl-provider-auth",
        "§6.4 provider-auth failure",
        "VL fails closed with its controlled reply when a provider has no credentials; V19 "
        "quietly sends the turn with the global key to the global endpoint.",
        _provider_auth,
    ),
    Allowed(
        "failed-turn",
        "A provider failure (Hermes' failed result)",
        "A failed turn is reported as a failure; V19 shows the error text as the assistant's "
        "answer on session chat, its stream and Responses (VN reports run.failed).",
        _failed_turn,
    ),
    Allowed(
        "vn-stop",
        "Stop of a finished run",
        "VN answers the finished run's status; V19's 404 only reflects its lost memory.",
        _stop_finished,
    ),
    Allowed(
        "sse-ids",
        "No `id:` lines, no `Last-Event-ID` resume",
        "Every frame but a closer carries an id of its own (its stored event's; on Responses its "
        "sequence number), so a client resumes after the last frame it saw, on any replica; "
        "upstream streams cannot be resumed at all.",
        _sse_ids,
    ),
    Allowed(
        "chat-reasoning",
        "Reasoning on the chat stream",
        "The model's reasoning as delta.reasoning_content chunks (with the assistant role, for "
        "strict clients), which hermes-webui reads.",
        _chat_reasoning,
    ),
    Allowed(
        "vl-runtime",
        "7. `runtime` metadata",
        "VL reports the runtime (provider, model, route source, lock) of each session turn.",
        _runtime,
    ),
    Allowed(
        "vl-401",
        "401 body `gateway_auth_failed`",
        "VL's code lets clients tell a gateway-key problem from a provider-key problem.",
        _auth_401,
    ),
    Allowed(
        "key-setting",
        "`X-Hermes-Session-Key` checks",
        "A 403 asking for a gateway key names this deployment's setting, HERMES_QUEUE_API_KEY, "
        "before upstream's API_SERVER_KEY (which is honoured as a fallback); the 401 stays "
        "upstream's word for word.",
        _key_setting,
    ),
    Allowed(
        "error-details",
        "Error envelope",
        "Every error names the field at fault and a machine-readable code where upstream "
        "leaves them null; message, type and status still match.",
        _error_details,
    ),
    Allowed(
        "vn-pagination",
        "GET `/api/sessions/{id}/messages`",
        "VN's paged transcript (latest 500 by default), a pagination block added.",
        _pagination,
    ),
    Allowed(
        "vn-session-model",
        "`model` column: stored from `body.model`",
        "VN stores no model for a session created without one, not the advertised alias.",
        _session_model,
    ),
    Allowed(
        "vl-create-lock",
        "2. Persisting a lock",
        "VL keeps the model a session was created with as an unconfirmed lock.",
        _create_lock,
    ),
    Allowed(
        "agent-snapshots",
        "Session row after a turn: the agent's snapshots",
        "Agents stay warm on the worker; no built prompt or agent config is cached on the row.",
        _agent_snapshots,
    ),
    Allowed(
        "vn-fork",
        "Fork: VN order with `_branched_from`",
        "VN marks a fork so its source keeps its own transcript (V19 answers the fork's).",
        _fork,
    ),
    Allowed(
        "vl-lock-capabilities",
        "Features true when served",
        "VL advertises the session model lock and model options it serves.",
        _lock_capabilities,
    ),
    Allowed(
        "vn-steer",
        "VN `run_steer`",
        "VN's run steering is served (from any replica), so capabilities advertise it.",
        _steer_capabilities,
    ),
    Allowed(
        "resumable",
        "Ours: `resumable_streams: true`",
        "Resumable streams are advertised, with their endpoint and where turns run.",
        _queue_capabilities,
    ),
    Allowed(
        "jobs-admin",
        "GET/POST `/api/jobs`, GET/PATCH/DELETE `/api/jobs/{job_id}`",
        "The jobs admin is served (workers fire the jobs), so capabilities advertise it.",
        _jobs_capabilities,
    ),
    Allowed(
        "run-attempt",
        "`GET /v1/runs/{id}`: `hermes.run`",
        "Runs are retried after a lost worker: the attempt, and why a run failed.",
        _run_fields,
    ),
    Allowed(
        "own-version",
        "GET `/health`, `/v1/health`",
        "The version is this server's own.",
        _health_version,
    ),
    Allowed(
        "responses-order",
        "Non-stream 200 `response`",
        "Final items in the stream's output_index order (upstream contradicts its own stream).",
        _responses_order,
    ),
    Allowed(
        "responses-shape",
        "Non-stream 200 `response`",
        "OpenAI's full Response object: its status fields and item ids, which SDKs read.",
        _responses_shape,
    ),
)


def apply_allowlist(
    where: str, up: Exchange, us: Exchange
) -> tuple[Exchange, Exchange, list[Difference]]:
    pair = Pair(where, up, us)
    for entry in ALLOWLIST:
        if pair.settled:
            break
        entry.reconcile(pair)
    return pair.up, pair.us, pair.noted
