"""Session chat: one turn per request, run by a worker, answered as JSON or upstream's SSE.

Each turn is an ordinary run (pollable and stoppable under ``/v1/runs``) created under the
one-active-run-per-session rule, or, with ``multitask_strategy: "steer"``, a steer of the
session's running turn, which the request then follows (``session_steer.py``). A dropped stream
never cancels the turn: the client resumes with ``GET …/chat/stream?run_id=`` and
``Last-Event-ID``, on any replica.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web

from hermes_queue.api.errors import ApiError, run_not_found
from hermes_queue.api.hermes.render import SessionStream
from hermes_queue.api.hermes.session_bodies import SessionChatBody
from hermes_queue.api.hermes.session_steer import steer_active_turn, take_pending_steer, with_steer
from hermes_queue.api.hermes.sessions import load_session
from hermes_queue.api.http.bodies import json_object
from hermes_queue.api.http.fields import session_key_header
from hermes_queue.api.http.sse import open_stream, resume_cursor
from hermes_queue.api.http.tenancy import owns, tenant
from hermes_queue.api.state import STATE, ApiState
from hermes_queue.api.turns.runtime_selection import select_for_session
from hermes_queue.api.turns.starter import Enqueued, NewTurn, StoredSession, turn_headers
from hermes_queue.events import EventType, just_before
from hermes_queue.replies import controlled_reply, is_controlled_reply
from hermes_queue.routing import RoutingConfig
from hermes_queue.runs.start import Strategy
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.store import SessionRow
from hermes_queue.store.lineage import tip_of

MAX_RUN_ID_LENGTH = 128


def parse_chat_body(
    body: dict[str, Any], row: SessionRow, routing: RoutingConfig
) -> tuple[NewTurn, SessionChatBody]:
    """The turn a chat body starts on the session ``row``, under its ``multitask_strategy``
    (``steer`` enqueues the turn when no running turn takes the message), and the body."""
    fields = SessionChatBody.parse(body)
    strategy = "enqueue" if fields.multitask_strategy == "steer" else fields.multitask_strategy
    turn = NewTurn(
        # The id as addressed: the turn runs on the session's live tip, resumable by either.
        TurnRequest(
            fields.message,
            instructions=fields.system_message,
            path_id=row.id,
            policy=fields.execution_policy,
        ),
        select_for_session(routing, row, body),
        StoredSession(row.id, cast(Strategy, strategy), lock_row=row),
        webhook=fields.webhook,
    )
    return turn, fields


@dataclass(frozen=True)
class Started:
    """The turn a chat request follows: the one it started, or the running one it steered
    (then ``steered_at`` is the id of its ``run.steered`` event)."""

    turn: Enqueued
    headers: dict[str, str]
    steered_at: str | None = None

    @property
    def created(self) -> Enqueued | None:
        """The run as the request created it; None when it steered a running one."""
        return self.turn if self.steered_at is None else None


async def start_turn(request: web.Request, state: ApiState) -> Started:
    """Validate, admit and enqueue one turn, or steer the running one (``session_steer.py``)."""
    session_key = session_key_header(request, state.settings.api.api_key)
    row = await load_session(request, request.match_info["session_id"])
    body = await json_object(request, state.settings.api.body_timeout_seconds)
    turn, fields = parse_chat_body(body, row, state.routing)
    if fields.take_pending_steer is not None:
        taken = await take_pending_steer(state, row, fields.take_pending_steer)
        message = with_steer(taken, turn.request.message)
        turn = dataclasses.replace(turn, request=dataclasses.replace(turn.request, message=message))
    if fields.multitask_strategy == "steer":
        steered = await steer_active_turn(state, row, turn.request.message)
        if steered is not None:
            headers = turn_headers(steered.session_id, steered.run_id, session_key)
            return Started(Enqueued(steered.run_id, steered.session_id), headers, steered.event_id)
    started = await state.turns.enqueue_turn(turn, tenant=tenant(request))
    return Started(started, turn_headers(started.session_id, started.run_id, session_key))


async def chat(request: web.Request) -> web.Response:
    state = request.app[STATE]
    started = await start_turn(request, state)
    turn = started.turn
    reply = await state.feed.final_reply(turn.run_id, created=started.created)
    event = reply.terminal
    return _completion(event.type, event.data, reply.shown, turn.session_id, started.headers)


def _completion(
    event_type: str,
    data: dict[str, Any],
    shown: str | None,
    session_id: str,
    headers: dict[str, str],
) -> web.Response:
    if event_type == EventType.RUN_FAILED and is_controlled_reply(data):
        event_type, data = EventType.RUN_COMPLETED, controlled_reply(data)
    if event_type == EventType.RUN_COMPLETED:
        content = shown if shown is not None else data.get("output", "")
        body = {
            "object": "hermes.session.chat.completion",
            "session_id": session_id,
            "message": {"role": "assistant", "content": content},
            "usage": data.get("usage", {}),
            "runtime": data.get("runtime", {}),
        }
        return web.json_response(body, headers=headers)
    if event_type == EventType.RUN_CANCELLED:
        error = ApiError(409, "run_cancelled", "The turn was stopped before it finished")
    else:
        error = ApiError(500, "agent_error", str(data.get("error") or "The turn failed"))
    return web.json_response(error.body(), status=error.status, headers=headers)


async def chat_stream(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    started = await start_turn(request, state)
    response = await open_stream(request, started.headers)
    # A steered turn is followed from its run.steered frame on, numbered as its own stream.
    after = just_before(started.steered_at) if started.steered_at else None
    await state.feed.pump(
        request, response, started.turn.run_id, None, SessionStream(after), created=started.created
    )
    return response


async def resume_stream(request: web.Request) -> web.StreamResponse:
    """Follow a session turn again: ``?run_id=`` or the session's active turn."""
    cursor = resume_cursor(request)
    session_id = request.match_info["session_id"]
    state = request.app[STATE]
    run_id = request.query.get("run_id")
    if not run_id:
        row = await load_session(request, session_id)
        run_id, _waiting = await state.runs.session_runs(await tip_of(state.store, row))
        if run_id is None:
            raise ApiError(404, "no_active_run", "This session has no turn in progress")
    if len(run_id) > MAX_RUN_ID_LENGTH:
        raise run_not_found(run_id[:MAX_RUN_ID_LENGTH])
    # Run record, cursor check and first replay page: one round trip. The stream numbers its
    # frames from the run's first event, so it is read from there, the cursor only deciding
    # which frames are sent (the closing ``done`` too, for a client that saw the terminal one).
    found = await state.feed.prefetch(run_id, cursor, from_start=True)
    record = found.record
    if (
        record is None
        or not owns(request, record.tenant)
        or session_id not in (record.session_id, record.request.path_id)
    ):
        raise run_not_found(run_id)
    found.at_end()  # a cursor past the run's newest event is refused (400)
    response = await open_stream(request, turn_headers(record.session_id, record.run_id, None))
    await state.feed.pump(
        request, response, record.run_id, None, SessionStream(cursor), page=found.page
    )
    return response
