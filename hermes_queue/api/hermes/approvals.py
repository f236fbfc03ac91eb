"""``POST /v1/runs/{run_id}/approval``: answer an agent's approval request from any replica.

Upstream can only resolve approvals in the process running the agent (upstream-api.md §7). Here the
answer is one script on the run record (``hermes_queue.runs.approvals``), which also tells the
worker holding the run over pub/sub, so the replica that receives the POST does not matter.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from hermes_queue.api.errors import ApiError, run_not_found
from hermes_queue.api.hermes.run_bodies import ApprovalBody
from hermes_queue.api.http.bodies import json_object
from hermes_queue.api.http.tenancy import owns
from hermes_queue.api.state import STATE

MAX_ID_LENGTH = 128


async def answer_approval(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    if len(run_id) > MAX_ID_LENGTH:
        raise run_not_found(run_id[:MAX_ID_LENGTH])
    state = request.app[STATE]
    fields = ApprovalBody.parse(await json_object(request, state.settings.api.body_timeout_seconds))
    choice, request_id = fields.choice, fields.request_id
    resolve_all = fields.all or fields.resolve_all
    # Where a run that does not exist is found missing: another tenant's is too.
    owner = await state.runs.owner(run_id)
    if owner is not None and not owns(request, owner):
        raise run_not_found(run_id)
    outcome = await state.runs.approvals.answer(
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
