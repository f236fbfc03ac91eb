"""How an attempt at a run begins: its request, and what its readers are told.

A first attempt announces ``run.started``. A later one (its predecessor's worker was lost, or
handed the run back on shutdown) resumes from the steps earlier attempts recorded
(agents/steps.py) and tells readers ``run.resumed`` with the id of the last event that is still
valid: everything up to the last recorded step stands, only what the interrupted step had
streamed is superseded. With no step recorded the turn starts over: ``run.restarted``, as
before durable steps.

One case cannot be resumed honestly: a client reading the run as an OpenAI stream (chat
completions, Responses) was shown text of the interrupted step, and that dialect cannot take
text back. Such an attempt does not run the step again; the run fails ``worker_lost`` and its
transcript keeps what the client saw (docs/compatibility.md §2.5, docs/reliability.md).
"""

from __future__ import annotations

from typing import Any

from hermes_queue.agents.base import AgentRequest, TurnLimits
from hermes_queue.agents.steps import StepJournal
from hermes_queue.events import EventType
from hermes_queue.routing import runtime_metadata
from hermes_queue.runs.attempt import Attempt
from hermes_queue.runs.repository import RunRepository
from hermes_queue.workers.persistence import SessionTurnLog
from hermes_queue.workers.sink import RunEventSink

WORKER_LOST_MID_TEXT = (
    "The worker running this turn was lost while its reply was streamed to a client that "
    "cannot take text back; the turn ends with what was shown"
)


class Unresumable(Exception):
    """The attempt must not go on (see the module docstring): ``done`` are the finished
    steps' messages and ``shown`` the reply text its client saw."""

    def __init__(self, done: list[dict[str, Any]], shown: str) -> None:
        super().__init__(WORKER_LOST_MID_TEXT)
        self.done = done
        self.shown = shown


def build_request(
    claim: Attempt,
    history: list[dict[str, Any]] | None = None,
    steps: list[dict[str, Any]] | None = None,
) -> AgentRequest:
    record, turn = claim.record, claim.record.request
    policy = turn.policy
    limits = TurnLimits(policy.max_turns, policy.toolsets) if policy is not None else TurnLimits()
    return AgentRequest(
        run_id=record.run_id,
        session_id=record.session_id,
        message=turn.message,
        history=list(turn.history) if history is None else history,
        instructions=turn.instructions,
        route=record.route,
        attempt=claim.number,
        steps=tuple(step["step"] for step in steps or ()),
        limits=limits,
    )


async def start_attempt(
    attempt: Attempt,
    repository: RunRepository,
    sink: RunEventSink,
    turn_log: SessionTurnLog | None,
) -> AgentRequest:
    """The attempt's request, after telling its readers how it begins; raises
    ``Unresumable`` (before the user message is stored again or anything is emitted) when
    it must not go on."""
    record = attempt.record
    steps = await repository.steps(record.run_id) if record.steps else []
    if attempt.number > 1 and record.seq > 0 and record.openai_stream:
        shown = await repository.text_after(record.run_id, record.step_event or None)
        if shown:
            done = StepJournal.of(step["step"] for step in steps).messages()
            all_shown = await repository.text_after(record.run_id, None)
            raise Unresumable(done, all_shown)
    from_store = record.history_from_store
    history = None
    if turn_log:
        # A turn whose history the client sends (/v1/runs) may be its session's first.
        history = await turn_log.start(
            record.request.message, with_history=from_store, create_session=not from_store
        )
    request = build_request(attempt, history, steps)
    if attempt.number == 1 or record.seq == 0:
        # An attempt whose predecessors wrote nothing is, for clients, the start of the run.
        data = {
            "attempt": attempt.number,
            "user_message": {"role": "user", "content": request.message},
            "runtime": runtime_metadata(record.route, None),
        }
        await sink.emit(EventType.RUN_STARTED, data)
        await sink.start_reply()
    elif steps:
        valid = {"attempt": attempt.number, "valid_through": record.step_event, "steps": len(steps)}
        await sink.emit(EventType.RUN_RESUMED, valid)
        # The reply goes on: what stands of it is what readers were shown up to the last step.
        shown = await repository.text_after(record.run_id, None, through=record.step_event)
        sink.continue_reply(shown)
    else:
        await sink.emit(EventType.RUN_RESTARTED, {"attempt": attempt.number})
        await sink.start_reply()
    return request
