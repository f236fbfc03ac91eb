"""``POST /v1/chat/completions`` (upstream-api.md §2.2, §3.2), each completion a queued run.

Without ``X-Hermes-Session-Id`` the conversation comes from the request and the session id is
derived from its system prompt and first user message, as upstream. With the header the
session's stored transcript is the history and the worker persists the turn, so a client that
sends only its latest message keeps its conversation. The run id is in ``X-Hermes-Run-Id``: a
client whose stream dropped follows the rest on ``/v1/runs/{run_id}/events``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from typing import Any

from aiohttp import web

from hermes_queue.api.errors import ApiError
from hermes_queue.api.feed import RunFeed
from hermes_queue.api.http.bodies import json_object
from hermes_queue.api.http.content import flatten_text, has_visible_payload, normalize_content
from hermes_queue.api.http.fields import session_id_value, session_key_header
from hermes_queue.api.http.sse import Renderer, open_stream
from hermes_queue.api.http.tenancy import tenant
from hermes_queue.api.openai.bodies import ChatCompletionBody
from hermes_queue.api.openai.chat_render import (
    CANCELLED,
    OUTPUT_TRUNCATED,
    TRUNCATED_MESSAGE,
    ChatStream,
    completion_id_for,
    hermes_block,
    usage_of,
)
from hermes_queue.api.state import STATE, ApiState
from hermes_queue.api.turns.idempotency import REPLAYED_HEADER, replay_gone
from hermes_queue.api.turns.runtime_selection import select_for_body
from hermes_queue.api.turns.starter import (
    Enqueued,
    NewTurn,
    RunSession,
    StoredSession,
    turn_headers,
)
from hermes_queue.booleans import coerce_bool
from hermes_queue.events import EventType
from hermes_queue.keyguard import KEY_SETTING
from hermes_queue.replies import controlled_reply, is_controlled_reply, truncated
from hermes_queue.routing import RoutingConfig
from hermes_queue.runs.model import FailReason
from hermes_queue.runs.turn_request import TurnRequest

SESSION_HEADER = "X-Hermes-Session-Id"


def derived_session_id(system_prompt: str, first_user: Any) -> str:
    """Every turn of one frontend conversation maps to one session (upstream's rule): the hash
    of the system prompt and the first user message's normalised content, as Python prints it
    (text, or the part list with its images)."""
    digest = hashlib.sha256(f"{system_prompt}\n{first_user}".encode()).hexdigest()
    return "api-" + digest[:16]


def parse_messages(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The flattened system prompt and the user/assistant conversation (last = this turn)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(
            400, "missing_messages", "Missing or invalid 'messages' field", param="messages"
        )
    system_parts: list[str] = []
    conversation: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ApiError(
                400,
                "invalid_messages",
                "Each message must be an object",
                param=f"messages[{index}]",
            )
        role, content = message.get("role"), message.get("content")
        if role == "system":
            # Every system message counts, an empty one too: upstream joins them with "\n",
            # and the derived session id hashes the result.
            system_parts.append(flatten_text(content))
        elif role in ("user", "assistant"):
            conversation.append(
                {"role": role, "content": normalize_content(content, f"messages[{index}].content")}
            )
    if (
        not conversation
        or conversation[-1]["role"] != "user"
        or not has_visible_payload(conversation[-1]["content"])
    ):
        raise ApiError(
            400, "missing_user_message", "No user message found in messages", param="messages"
        )
    return "\n".join(system_parts), conversation


def _cancel_on_disconnect(request: web.Request, body: dict[str, Any]) -> bool:
    """By default a dropped stream leaves the turn running (follow it on /v1/runs/{id}/events);
    a client that would rather stop it asks with ``cancel_on_disconnect`` or the header."""
    header = request.headers.get("X-Hermes-Cancel-On-Disconnect")
    return coerce_bool(body.get("cancel_on_disconnect", header), False)


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _session_header(request: web.Request, api_key: str) -> str | None:
    """The validated ``X-Hermes-Session-Id``, or None when the client sent none."""
    raw = request.headers.get(SESSION_HEADER)
    if raw is None:
        return None
    if not api_key:
        raise ApiError(
            403,
            None,
            "Session continuation requires API key authentication. "
            f"Configure {KEY_SETTING} to enable this feature.",
        )
    return session_id_value(raw, param=SESSION_HEADER)


def parse_completion(
    body: dict[str, Any], continued: str | None, routing: RoutingConfig
) -> NewTurn:
    """The turn a completion request starts: on the ``continued`` session (whose stored
    transcript is the history), else on the session derived from the conversation it sends."""
    fields = ChatCompletionBody.parse(body)
    system_prompt, conversation = parse_messages(body)
    turn = TurnRequest(conversation[-1]["content"], instructions=system_prompt or None)
    session: RunSession | StoredSession
    if continued is not None:
        session = StoredSession(continued, "enqueue", create_missing=True)
    else:
        first_user = next(m for m in conversation if m["role"] == "user")
        session = RunSession(derived_session_id(system_prompt, first_user["content"]))
        turn = dataclasses.replace(turn, history=conversation[:-1])
    return NewTurn(
        turn,
        select_for_body(routing, body),
        session,
        named_model=fields.model,
        openai_stream=coerce_bool(body.get("stream"), False),
    )


async def chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    session_key = session_key_header(request, state.settings.api.api_key)
    continued = _session_header(request, state.settings.api.api_key)
    body = await json_object(request, state.settings.api.body_timeout_seconds)
    turn = parse_completion(body, continued, state.routing)
    stream = coerce_bool(body.get("stream"), False)
    # The response names the model the client asked for (upstream echoes its alias).
    model = turn.named_model or state.settings.routing.model_name
    replayed: dict[str, str] = {}
    enqueued: Enqueued | None = None  # None: a retry of an earlier request (a replay)
    idempotency = state.idempotency
    async with await idempotency.begin(
        request.headers, "chat", body, tenant=tenant(request), headers=(SESSION_HEADER,)
    ) as idem:
        if idem.replay_of is None:
            enqueued = await state.turns.enqueue_turn(
                turn, tenant=tenant(request), created=idem.record
            )
            run_id = enqueued.run_id
    if enqueued is not None:
        created, session_id = int(enqueued.created_at), enqueued.session_id
    else:  # a retry: the same run, rendered the same way (a stream replays from its start)
        assert idem.replay_of is not None  # only a replay enqueues nothing
        run_id = idem.replay_of
        replayed[REPLAYED_HEADER] = "true"
        record = await state.runs.get(run_id)
        if record is None:  # only a replay can miss it: records expire before their runs
            raise replay_gone(run_id)
        created, session_id = int(record.created_at), record.session_id
    headers = {**turn_headers(session_id, run_id, session_key), **replayed}
    if stream:
        renderer = ChatStream(completion_id_for(run_id), created, model)
        cancel = _cancel_on_disconnect(request, body)
        return await _stream(request, state, run_id, renderer, headers, cancel, enqueued)
    return await _complete(state.feed, run_id, created, model, headers, enqueued)


async def _stream(
    request: web.Request,
    state: ApiState,
    run_id: str,
    renderer: Renderer,
    headers: dict[str, str],
    cancel: bool,
    enqueued: Enqueued | None,
) -> web.StreamResponse:
    """The completion as chunks; with ``cancel`` a client that leaves stops the run.
    ``enqueued``: the run as this request created it (None: a replay)."""
    response = await open_stream(request, headers)
    try:
        finished = await state.feed.pump(
            request, response, run_id, None, renderer, created=enqueued
        )
    except asyncio.CancelledError:  # aiohttp cancels the handler when the client leaves
        if cancel:
            await asyncio.shield(state.runs.request_stop(run_id))
        raise
    if not finished and cancel and _client_gone(request):
        await state.runs.request_stop(run_id)
    return response


def _unfinished_headers(*, partial: bool, error: str) -> dict[str, str]:
    """Upstream's headers on a completion that did not simply succeed."""
    return {
        "X-Hermes-Completed": "false",
        "X-Hermes-Partial": "true" if partial else "false",
        "X-Hermes-Error": " ".join(error.split())[:200],  # one header line, always
    }


async def _complete(
    feed: RunFeed,
    run_id: str,
    created: int,
    model: str,
    headers: dict[str, str],
    enqueued: Enqueued | None,
) -> web.Response:
    reply = await feed.final_reply(run_id, dialect="openai", created=enqueued)
    event, data = reply.terminal, reply.terminal.data
    if event.type == EventType.RUN_FAILED and is_controlled_reply(data):
        data = controlled_reply(data)  # upstream answers it as an ordinary reply
    hermes: dict[str, Any] | None = None
    if event.type == EventType.RUN_COMPLETED or data is not event.data:
        content, finish = (
            reply.shown if reply.shown is not None else str(data.get("output")),
            "stop",
        )
        if truncated(data):  # upstream's soft-partial answer: 200, finish_reason "length"
            finish, error = "length", str(data.get("error") or TRUNCATED_MESSAGE)
            hermes = hermes_block(
                completed=False,
                partial=True,
                failed=False,
                error=error,
                error_code=OUTPUT_TRUNCATED,
            )
            headers = {**headers, **_unfinished_headers(partial=True, error=error)}
    else:
        error = str(data.get("error") or "the turn was stopped")
        # The agent's failed reply is its text, as upstream answers Hermes' failed result (200,
        # finish_reason "error"); a turn that failed otherwise or was stopped, having said
        # nothing, has no answer at all.
        agent_failed = data.get("reason") == FailReason.AGENT_ERROR
        content = reply.streamed or (error if agent_failed else "")
        if not content:
            raise ApiError(
                502,
                "agent_incomplete",
                error,
                type="server_error",
                headers=headers,
                extra={
                    "hermes": hermes_block(completed=False, partial=False, failed=True, error=None)
                },
            )
        finish = "error"
        partial = bool(reply.streamed)
        code = CANCELLED if event.type == EventType.RUN_CANCELLED else "agent_error"
        hermes = hermes_block(
            completed=False, partial=partial, failed=True, error=error, error_code=code
        )
        headers = {**headers, **_unfinished_headers(partial=partial, error=error)}
    body: dict[str, Any] = {
        "id": completion_id_for(run_id),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
            }
        ],
        "usage": usage_of(data.get("usage")),
    }
    if hermes is not None:
        body["hermes"] = hermes
    return web.json_response(body, headers=headers)
