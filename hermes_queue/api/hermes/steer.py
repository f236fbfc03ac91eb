"""``POST /v1/runs/{run_id}/steer``: guidance for a running turn, from any replica
(upstream-api.md §4.5).

Upstream hands the text to the agent object in its own process, so only that replica can steer
the run. Here the steer is one script on the run record (``hermes_queue.runs.steers``): the
worker running the turn picks it up with its next recorded step and applies it at the agent's
next tool-result boundary; a steer that never found one comes back as the run's
``pending_steer``. The checks are upstream's, in its order: the run (404), that it is running
(409 ``run_not_accepting_steer``, before the body is read), the text (400
``invalid_steer_input``); ``steer_not_accepted`` (409) when the run already holds as many
pending steers as it takes.
"""

from __future__ import annotations

from aiohttp import web

from hermes_queue.api.errors import ApiError, run_not_found
from hermes_queue.api.hermes.run_bodies import SteerBody
from hermes_queue.api.http.bodies import json_object
from hermes_queue.api.http.tenancy import owns
from hermes_queue.api.state import STATE
from hermes_queue.runs.model import RunStatus
from hermes_queue.runs.steers import MAX_PENDING_STEERS, SteerOutcome

MAX_ID_LENGTH = 128


def not_accepting(run_id: str) -> ApiError:
    return ApiError(
        409,
        "run_not_accepting_steer",
        f"Run is not currently accepting steer input: {run_id}",
    )


def refused(run_id: str, outcome: SteerOutcome) -> ApiError | None:
    """What a steer the script did not accept answers (None: it was accepted)."""
    match outcome.verdict:
        case "accepted":
            return None
        case "missing":
            return run_not_found(run_id)
        case "full":
            return ApiError(
                409,
                "steer_not_accepted",
                f"Run did not accept steer text: {run_id} already has {MAX_PENDING_STEERS} "
                "steers waiting for its next tool result",
            )
        case _:
            return not_accepting(run_id)


async def steer_run(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    if len(run_id) > MAX_ID_LENGTH:
        raise run_not_found(run_id[:MAX_ID_LENGTH])
    state = request.app[STATE]
    record = await state.runs.get(run_id)
    if record is None or not owns(request, record.tenant):
        raise run_not_found(run_id)
    if record.status != RunStatus.RUNNING:
        raise not_accepting(run_id)
    body = SteerBody.parse(await json_object(request, state.settings.api.body_timeout_seconds))
    error = refused(run_id, await state.runs.steers.steer(run_id, body.steer_text))
    if error is not None:
        raise error
    return web.json_response({"object": "hermes.run.steer", "run_id": run_id, "accepted": True})
