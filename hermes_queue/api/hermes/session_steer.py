"""Steering from session chat: what a chat UI's "steer" mode needs (hermes-webui's default
message mode; LangGraph's double-texting).

- ``multitask_strategy: "steer"``: while the session's turn is running, the message is handed to
  it as a steer (``runs/steers.py``, the same as ``POST /v1/runs/{id}/steer``) and the request
  follows that turn: its JSON answer is the turn's reply, its stream goes on from the
  ``run.steered`` frame. When there is no running turn to take it (the session is idle, its turn
  is still queued, waiting for approval or stopping, or it ended meanwhile), the message starts
  a turn of its own, queued behind any active one (``enqueue``).
- ``take_pending_steer: <run id>``: a completed turn of the session whose steers its agent never
  applied (it ended first: its ``pending_steer``) hands that text to this turn, before the
  message, once (``take_steer.lua``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hermes_queue.api.errors import ApiError, run_not_found
from hermes_queue.api.http.content import flatten_text
from hermes_queue.api.state import ApiState
from hermes_queue.store import SessionRow
from hermes_queue.store.lineage import tip_of


@dataclass(frozen=True)
class Steered:
    """The running turn a chat message steered, on the session it runs on, and the id of its
    ``run.steered`` event (where the request's stream starts)."""

    run_id: str
    session_id: str
    event_id: str


async def steer_active_turn(state: ApiState, row: SessionRow, message: Any) -> Steered | None:
    """Steer the session's running turn with ``message``'s text; None when no turn took it."""
    text = flatten_text(message).strip()
    if not text:
        return None
    session_id = await tip_of(state.store, row)
    active, _waiting = await state.runs.session_runs(session_id)
    if active is None:
        return None
    outcome = await state.runs.steers.steer(active, text)
    if outcome.verdict != "accepted":
        return None
    return Steered(active, session_id, outcome.event_id)


async def take_pending_steer(state: ApiState, row: SessionRow, run_id: str) -> str:
    """The pending steer of the session's completed turn ``run_id``, taken (see above)."""
    record = await state.runs.get(run_id)
    if record is None or row.id not in (record.session_id, record.request.path_id):
        raise run_not_found(run_id)
    text = await state.runs.steers.take(run_id)
    if text is None:
        raise ApiError(
            409,
            "pending_steer_unavailable",
            f"Run {run_id} has no pending steer to take (none, not completed, or taken)",
            param="take_pending_steer",
        )
    return text


def with_steer(text: str, message: Any) -> Any:
    """``message`` (text or content parts) with a taken steer's text before it."""
    if isinstance(message, str):
        return f"{text}\n\n{message}"
    return [{"type": "text", "text": text}, *message]
