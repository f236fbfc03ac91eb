"""``POST /v1/runs/{run_id}/approval``: answer an agent's approval request from any replica.

Upstream can only resolve approvals in the process running the agent (HERMES_API §7). Here the
answer is one script on the run record (``hermes_queue.runs.approvals``), which also tells the
worker holding the run over pub/sub, so the replica that receives the POST does not matter.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from hermes_queue.api.errors import ApiError, run_not_found
from hermes_queue.api.state import STATE
from hermes_queue.api.validation import json_object
from hermes_queue.booleans import coerce_bool
from hermes_queue.events import APPROVAL_CHOICES

MAX_ID_LENGTH = 128
# Upstream's aliases for a one-time approval.
CHOICE_ALIASES = {"approve": "once", "approved": "once", "allow": "once"}


def parse_choice(value: Any) -> str:
    """One of once/session/always/deny (aliases folded), else 400 ``invalid_approval_choice``."""
    text = value.strip().lower() if isinstance(value, str) else ""
    choice = CHOICE_ALIASES.get(text, text)
    if choice not in APPROVAL_CHOICES:
        raise ApiError(
            400,
            "invalid_approval_choice",
            f"Invalid approval choice; expected one of: {', '.join(APPROVAL_CHOICES)}",
            param="choice",
        )
    return choice


def parse_request_id(body: dict[str, Any]) -> str:
    """VN's optional ``request_id``: target one pending request instead of the oldest."""
    value = body.get("request_id")
    if value is None:
        return ""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ID_LENGTH:
        raise ApiError(
            400, "invalid_approval_request", "Invalid approval request_id", param="request_id"
        )
    return value.strip()


async def answer_approval(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    if len(run_id) > MAX_ID_LENGTH:
        raise run_not_found(run_id[:MAX_ID_LENGTH])
    body = await json_object(request)
    choice = parse_choice(body.get("choice"))
    resolve_all = coerce_bool(body.get("all"), False) or coerce_bool(body.get("resolve_all"), False)
    request_id = parse_request_id(body)
    outcome = await request.app[STATE].runs.approvals.answer(
        run_id, choice, resolve_all=resolve_all, request_id=request_id
    )
    if outcome.verdict == "missing":
        raise run_not_found(run_id)
    if outcome.verdict == "not_active":
        raise ApiError(409, "approval_not_active", f"No approval is pending for run {run_id}")
    if outcome.verdict == "not_pending":
        raise ApiError(
            409,
            "approval_not_pending",
            f"Approval request {request_id} is not pending for run {run_id}",
            param="request_id",
        )
    payload: dict[str, Any] = {
        "object": "hermes.run.approval_response",
        "run_id": run_id,
        "choice": choice,
        "resolved": len(outcome.request_ids),
    }
    if request_id:
        payload["request_id"] = request_id
    return web.json_response(payload)
