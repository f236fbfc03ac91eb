"""The turn a run carries from the API to the worker: the run record's ``request`` field.

Every endpoint that starts a turn parses its body into a :class:`TurnRequest`; the run record
stores it as JSON, and the worker (``workers/turn.py``), the Responses endpoint (its response
object) and session chat (resuming a stream by the session id the client used) read it back.

Versioning, for rolling upgrades (API replicas and workers of two releases share one Redis):
``v`` is the version of the writer's :class:`TurnRequest`. A newer writer only ever *adds*
fields, and a field never changes its meaning; a change that old readers could not ignore needs
a field of a new name. So:

- a newer reader decodes an older record (``v`` absent means 0, the unversioned records of
  before; they hold the same fields as version 1) with defaults for what it lacks;
- an older reader decodes a newer record by the fields it knows and ignores the rest (every
  reader up to now reads by name and ignores unknown keys), and so keeps working during the
  upgrade.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hermes_queue.runs.trace_context import carrier_of

# 2: ``trace`` (the W3C trace context of the request that started the turn) may be present.
# 3: ``policy`` (the run's ``execution_policy``) may be present.
TURN_REQUEST_VERSION = 3

# A message's content: text, or content parts (Chat Completions vision parts and the like).
Content = str | list[dict[str, Any]]


def _optional_text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class ResponseSettings:
    """What a ``/v1/responses`` object says besides its output, fixed when its run is created
    so that any replica rebuilds the same object from the run."""

    created_at: int
    model: str
    previous_response_id: str | None = None
    conversation: str | None = None
    store: bool = True
    background: bool = False
    # Streamed: the stored object is the one the stream ends with (its final text is all the
    # text streamed, tool outputs are part lists), as upstream stores it.
    stream: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "created_at": self.created_at,
            "model": self.model,
            "previous_response_id": self.previous_response_id,
            "conversation": self.conversation,
            "store": self.store,
            "background": self.background,
            "stream": self.stream,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ResponseSettings:
        return cls(
            created_at=int(data.get("created_at") or 0),
            model=str(data.get("model") or ""),
            previous_response_id=_optional_text(data.get("previous_response_id")),
            conversation=_optional_text(data.get("conversation")),
            store=bool(data.get("store", True)),
            background=bool(data.get("background", False)),
            stream=bool(data.get("stream", False)),
        )


@dataclass(frozen=True)
class ExecutionPolicy:
    """A run's own limits (upstream's ``execution_policy``), each only shrinking what the
    deployment allows: ``max_turns`` caps the agent's model calls (its ``max_iterations``),
    ``run_budget_seconds`` the run's wall-clock time from its first claim (checked by the
    worker at each step boundary), ``toolsets`` what the agent is offered (intersected with
    the deployment's). None: the deployment's own."""

    max_turns: int | None = None
    run_budget_seconds: int | None = None
    toolsets: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.max_turns is not None:
            data["max_turns"] = self.max_turns
        if self.run_budget_seconds is not None:
            data["run_budget_seconds"] = self.run_budget_seconds
        if self.toolsets is not None:
            data["toolsets"] = list(self.toolsets)
        return data

    @classmethod
    def from_json(cls, data: Any) -> ExecutionPolicy | None:
        if not isinstance(data, dict):
            return None
        toolsets = data.get("toolsets")
        return cls(
            max_turns=_positive(data.get("max_turns")),
            run_budget_seconds=_positive(data.get("run_budget_seconds")),
            toolsets=tuple(str(t) for t in toolsets) if isinstance(toolsets, list) else None,
        )


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True)
class TurnRequest:
    """One user turn as the API accepted it; the route it runs on travels beside it (the run
    record's ``route``), credentials never."""

    # The user's message of this turn.
    message: Content = ""
    # The conversation before it, when the client sent it (a stored session's history is
    # read by the worker from the session store instead).
    history: list[dict[str, Any]] = field(default_factory=list)
    # The system prompt for this turn, if the client gave one.
    instructions: str | None = None
    # Session chat: the session id the client addressed, which may be an ancestor of the
    # session the turn runs on (the live tip after compression); resuming by it finds the run.
    path_id: str | None = None
    # ``/v1/responses`` only: what its response object says besides its output.
    response: ResponseSettings | None = None
    # The W3C trace context (``traceparent``, ``tracestate``) the turn's worker spans continue
    # (hermes_queue/tracing/), when the API that accepted it traces.
    trace: dict[str, str] | None = None
    # The run's own limits (``execution_policy``), when the client set any.
    policy: ExecutionPolicy | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "v": TURN_REQUEST_VERSION,
            "message": self.message,
            "history": self.history,
            "instructions": self.instructions,
        }
        if self.path_id is not None:
            data["path_id"] = self.path_id
        if self.response is not None:
            data["response"] = self.response.to_json()
        if self.trace:
            data["trace"] = dict(self.trace)
        if self.policy is not None:
            data["policy"] = self.policy.to_json()
        return data

    @classmethod
    def from_json(cls, data: Any) -> TurnRequest:
        """Any version's record (see the module docstring); what is missing or malformed
        takes its default."""
        if not isinstance(data, dict):
            return cls()
        message = data.get("message", "")
        history = data.get("history")
        response = data.get("response")
        return cls(
            message=message if isinstance(message, str | list) else "",
            history=[m for m in history if isinstance(m, dict)]
            if isinstance(history, list)
            else [],
            instructions=_optional_text(data.get("instructions")),
            path_id=_optional_text(data.get("path_id")),
            response=ResponseSettings.from_json(response) if isinstance(response, dict) else None,
            trace=carrier_of(data.get("trace")),
            policy=ExecutionPolicy.from_json(data.get("policy")),
        )
