"""Durable agent steps: what a backend records as a turn goes, and what a later attempt of the
same run resumes from (docs/reliability.md, "Durable steps").

A step is one model call, with the assistant message it produced (tool calls included), or one
tool call: its start, recorded just before it runs, then its result. A backend that takes a
``StepSink`` records each step the moment it finishes, and the worker writes it durably (fenced
by attempt, with the events emitted before it, in one Redis call) before the backend goes on.
A new attempt gets the records in ``AgentRequest.steps`` and continues after the last one:

- a recorded model call is never sent again, a recorded tool call never executed again;
- a tool that started but has no result was in flight when its worker was lost: it runs again
  only if it is known to have no effect (``READ_ONLY_TOOLS``), otherwise the model is handed
  ``LOST_TOOL_RESULT`` instead (its effect is unknown) and decides;
- only the model call in flight at the loss is sent again.

The records are plain JSON, the backend's own to shape beyond ``kind`` (and ``steers``, below);
the helpers below build the shapes both backends share. Nothing of a record is shown to clients
as is.

Steers (runs/steers.py) travel with the steps too. A ``SteerSink`` knows the run's steers still
pending, as of the last step it recorded; a backend applies them at its next tool-result
boundary and records the tool result that carries them again (a later record of a call wins),
naming the steers it applied (``steered``). The worker takes those off the run's pending steers
in the same fenced call that records the step, so a resumed attempt replays the steered result
(the steer reaches the model once) and never applies it again; a steer accepted but not applied
before a worker was lost is still pending, and the next attempt applies it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable


class StepKind(StrEnum):
    MODEL = "model"  # one model call: ``index`` (0, 1, …), ``message``, plus the backend's own
    TOOL_STARTED = "tool_started"  # ``call_id``, ``name``, ``args``: about to run
    TOOL = "tool"  # ``call_id``, ``name``, ``message`` (the tool message), ``lost``


# Tools whose effect, should they run twice, is nothing: re-run when their worker was lost while
# they ran. Hermes' own list of tools that "cannot mutate either external state or Hermes session
# state" (agent/tool_result_classification.py NO_EFFECT_TOOL_NAMES, 0.19); the hermes backend
# uses Hermes' set when it has one. Anything not listed, MCP and plugin tools included, may have
# had an effect.
READ_ONLY_TOOLS = frozenset(
    {
        "read_file",
        "search_files",
        "session_search",
        "skill_view",
        "skills_list",
        "web_extract",
        "web_search",
        "vision_analyze",
        "browser_snapshot",
        "browser_get_images",
        "browser_console",
        "read_terminal",
    }
)

# What the model is told of a tool whose worker was lost while it ran (Hermes' own wording for
# an orphaned call, agent/replay_cleanup.py): it decides whether to look, retry or go on.
LOST_TOOL_RESULT = (
    "The worker running this tool call was lost before the call reported a result. The tool "
    "may have executed before it stopped; its effect is UNKNOWN. Inspect the current state "
    "before retrying."
)


@dataclass(frozen=True)
class Steer:
    """Guidance a client sent a running turn (``POST /v1/runs/{id}/steer``), not yet applied."""

    id: str
    text: str


# The key of a step record naming the steers it applied (their ids).
STEERS_KEY = "steers"


def steered(record: dict[str, Any], steers: Iterable[Steer]) -> dict[str, Any]:
    """``record`` (a tool result carrying steer text) naming the steers it applied."""
    return {**record, STEERS_KEY: [steer.id for steer in steers]}


def applied_steers(record: Mapping[str, Any]) -> tuple[str, ...]:
    """The ids of the steers a step record applied."""
    return tuple(str(steer_id) for steer_id in record.get(STEERS_KEY) or ())


def model_step(index: int, message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"kind": StepKind.MODEL, "index": index, "message": message, **extra}


def tool_started(call_id: str, name: str, args: Any) -> dict[str, Any]:
    return {"kind": StepKind.TOOL_STARTED, "call_id": call_id, "name": name, "args": args}


def tool_result(
    call_id: str, name: str, message: dict[str, Any], *, lost: bool = False
) -> dict[str, Any]:
    return {
        "kind": StepKind.TOOL,
        "call_id": call_id,
        "name": name,
        "message": message,
        "lost": lost,
    }


@dataclass(frozen=True)
class StepJournal:
    """The steps a run recorded so far (``AgentRequest.steps``), indexed for a resuming backend.
    Empty for a first attempt."""

    records: tuple[dict[str, Any], ...] = ()
    _models: dict[int, dict[str, Any]] = field(default_factory=dict, repr=False)
    _results: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    _started: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for record in self.records:
            match record.get("kind"):
                case StepKind.MODEL:
                    self._models[int(record["index"])] = record
                case StepKind.TOOL:
                    self._results[str(record["call_id"])] = record  # a later one wins
                case StepKind.TOOL_STARTED:
                    self._started[str(record["call_id"])] = record

    @classmethod
    def of(cls, steps: Iterable[Mapping[str, Any]]) -> StepJournal:
        return cls(tuple(dict(step) for step in steps))

    def __bool__(self) -> bool:
        return bool(self.records)

    @property
    def model_calls(self) -> int:
        return len(self._models)

    def model(self, index: int) -> dict[str, Any] | None:
        """The recorded ``index``-th model call of the turn (0-based), if it finished."""
        return self._models.get(index)

    def result(self, call_id: str) -> dict[str, Any] | None:
        """The recorded result of the tool call, if it finished (or was declared lost)."""
        return self._results.get(call_id)

    def in_flight(self, call_id: str) -> bool:
        """The call started and has no result: its worker was lost while it ran."""
        return call_id in self._started and call_id not in self._results

    def messages(self) -> list[dict[str, Any]]:
        """The transcript of the finished steps, in order: each model call's message and each
        tool result's message."""
        return [
            dict(record["message"])
            for record in self.records
            if record.get("kind") in (StepKind.MODEL, StepKind.TOOL) and record.get("message")
        ]


def rerun_when_lost(name: str, read_only: frozenset[str] = READ_ONLY_TOOLS) -> bool:
    """Whether a call of tool ``name`` in flight at a worker's loss runs again (else the model
    is told its outcome is unknown)."""
    return name in read_only


@runtime_checkable
class StepSink(Protocol):
    """A sink that records steps durably (the worker's). ``step`` returns once the record, and
    every event emitted before it, is stored; it raises what stops the attempt: the lease was
    lost, Redis stayed away, or (``HandBack``) the worker is stopping and this step was the
    attempt's last. ``last``: the turn ends after this step whatever happens, so the worker
    never hands it back there."""

    async def step(self, record: dict[str, Any], *, last: bool = False) -> None: ...


@runtime_checkable
class SteerSink(Protocol):
    """A sink that knows the run's pending steers (the worker's): those accepted and not yet
    applied, oldest first, as of the last step it recorded (or the attempt's start)."""

    @property
    def steers(self) -> tuple[Steer, ...]: ...


class RunBudgetExceeded(Exception):
    """Raised by ``StepSink.step`` once the run has spent its ``run_budget_seconds``
    (``execution_policy``): the step just recorded is the run's last, and it ends failed."""


class HandBack(Exception):
    """Raised by ``StepSink.step`` when the worker is stopping: the step just recorded is this
    attempt's last, the run goes back to the queue and another worker resumes it from there."""


__all__ = [
    "LOST_TOOL_RESULT",
    "READ_ONLY_TOOLS",
    "STEERS_KEY",
    "HandBack",
    "RunBudgetExceeded",
    "Steer",
    "SteerSink",
    "StepJournal",
    "StepKind",
    "StepSink",
    "applied_steers",
    "model_step",
    "rerun_when_lost",
    "steered",
    "tool_result",
    "tool_started",
]
