"""The agent extension point: what a worker needs from anything that can run one chat turn.

A backend never touches Redis or HTTP. It reads an ``AgentRequest``, reports progress through an
``EventSink`` (which the worker turns into fenced stream appends), watches a ``CancelToken`` and
returns an ``AgentResult``. Failures are raised as ``AgentError`` with a message that is safe to
show to the client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from hermes_queue.events import APPROVAL_CHOICES
from hermes_queue.routing import Selection


@dataclass(frozen=True)
class TurnLimits:
    """What a run's ``execution_policy`` asks of its backend: at most ``max_turns`` model calls
    (the agent's iteration limit, if lower than the backend's own), and only the toolsets in
    ``toolsets`` of those the backend enables. None: the backend's own. (Its wall-clock budget
    is the worker's to enforce, at step boundaries.)"""

    max_turns: int | None = None
    toolsets: tuple[str, ...] | None = None


@dataclass(frozen=True)
class AgentRequest:
    run_id: str
    session_id: str
    # The user turn: a string or a list of content parts (already normalised by the API).
    message: Any
    history: list[dict[str, Any]] = field(default_factory=list)
    instructions: str | None = None
    # The resolved route (provider, model, model_options, fallback_model...), as the run
    # record holds it; never credentials. Empty provider or model: the backend's default.
    route: Selection = field(default_factory=Selection)
    attempt: int = 1
    # The steps earlier attempts of this run recorded (agents/steps.py): a backend that
    # records steps resumes after them; empty for a first attempt.
    steps: tuple[dict[str, Any], ...] = ()
    limits: TurnLimits = field(default_factory=TurnLimits)


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True)
class AgentResult:
    output: str
    usage: Usage = field(default_factory=Usage)
    # This turn's assistant and tool messages, in the client-safe message shape.
    messages: list[dict[str, Any]] = field(default_factory=list)
    # The runtime that actually ran (provider, model).
    runtime: dict[str, Any] = field(default_factory=dict)
    # The agent's estimate of what the turn cost (USD), when it prices its model calls.
    cost_usd: float | None = None
    # ``length`` when the reply stopped at the model's output limit (it is then partial:
    # upstream's ``output_truncated`` outcome); ``stop`` otherwise.
    finish_reason: Literal["stop", "length"] = "stop"


class AgentError(Exception):
    """The turn failed; ``str(exc)`` is shown to the client, so it must hold no secret."""


PROVIDER_AUTH_FAILED = "⚠️ Provider authentication failed: {reason}"


class ProviderAuthError(AgentError):
    """The provider's credentials are missing or were rejected. The text is upstream's
    controlled reply, which session chat shows as the assistant's answer (upstream-api.md §6.4)."""

    def __init__(self, reason: str) -> None:
        super().__init__(PROVIDER_AUTH_FAILED.format(reason=reason))
        self.reason = reason


@dataclass(frozen=True)
class ApprovalRequest:
    """A command the agent wants consent for before running it (upstream-api.md §4.3).

    ``command`` is the agent's own command text, shown to the person approving it; it must not
    carry secrets. Without ``allow_permanent`` the ``always`` choice is not offered.
    """

    command: str
    description: str = ""
    pattern_key: str = ""
    pattern_keys: tuple[str, ...] = ()
    allow_permanent: bool = True

    @property
    def choices(self) -> list[str]:
        if self.allow_permanent:
            return list(APPROVAL_CHOICES)
        return [choice for choice in APPROVAL_CHOICES if choice != "always"]

    def as_event_data(self, request_id: str) -> dict[str, Any]:
        return {
            "request_id": request_id,
            "command": self.command,
            "description": self.description,
            "pattern_key": self.pattern_key,
            "pattern_keys": list(self.pattern_keys)
            or ([self.pattern_key] if self.pattern_key else []),
            "allow_permanent": self.allow_permanent,
            "choices": self.choices,
        }


# A delegated child agent's lifecycle: ``subagent.start`` / ``subagent.complete`` events.
SubagentPhase = Literal["start", "complete"]


class TurnCancelled(Exception):
    """Raised by a backend that stopped because its cancel token fired. ``messages``: what the
    turn had finished before it stopped (its assistant and tool messages, in ``AgentResult``'s
    shape), when the backend knows; the worker stores them with the reply as far as it went."""

    def __init__(self, reason: str = "", messages: list[dict[str, Any]] | None = None) -> None:
        super().__init__(reason)
        self.messages = list(messages or [])


class CancelToken:
    """Set by the worker when a stop request reaches the run; backends poll or await it."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.reason = ""

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self, reason: str = "stop requested") -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    async def wait(self) -> None:
        await self._event.wait()

    async def sleep(self, seconds: float) -> None:
        """Sleep, but raise ``TurnCancelled`` as soon as the token fires."""
        if self.cancelled:
            raise TurnCancelled(self.reason)
        try:
            async with asyncio.timeout(seconds):  # not wait_for: it can swallow a cancellation
                await self._event.wait()
        except TimeoutError:
            return
        raise TurnCancelled(self.reason)


class EventSink(Protocol):
    """Where a backend reports progress. Each call is one canonical event, durably appended."""

    async def delta(self, text: str) -> None: ...

    async def reasoning(self, text: str) -> None: ...

    async def tool_started(
        self,
        name: str,
        call_id: str,
        preview: str | None = None,
        args: Any = None,
        emoji: str | None = None,
    ) -> None:
        """A tool call began; ``emoji``: the agent's own icon for the tool, if it has one."""
        ...

    async def tool_completed(
        self,
        name: str,
        call_id: str,
        duration: float = 0.0,
        error: bool = False,
        result: str | None = None,
    ) -> None: ...

    async def subagent(self, phase: SubagentPhase, details: dict[str, Any]) -> None:
        """A child agent the turn delegated to started or finished. ``details`` holds only
        fields of ``events.SUBAGENT_FIELDS`` with JSON values and free text already redacted:
        the sink stores them as given, and every reader of the run sees them."""
        ...

    async def approval(self, request: ApprovalRequest) -> str:
        """Ask for consent and wait for it; returns ``once``, ``session``, ``always`` or
        ``deny``. Silence is not consent: an unanswered request comes back ``deny`` after the
        configured timeout. Raises ``TurnCancelled`` when the run is stopped meanwhile."""
        ...


@runtime_checkable
class NoteSink(Protocol):
    """A sink that also takes the agent's progress notes: short "what I am doing" texts the
    agent tells between model calls (Hermes' ``reasoning.available`` callback, the first 500
    characters of each reply before its tools run), distinct from the model's streamed
    reasoning (``EventSink.reasoning``). Upstream shows them on its session stream
    (``tool.progress``, ``_thinking``) and runs stream (``reasoning.available``)."""

    async def thinking(self, text: str) -> None: ...


@runtime_checkable
class WindowedSink(Protocol):
    """A sink that holds a reply's deltas for a window after some went out (the worker's
    ``stream_coalesce_ms``): a delta it is given before that window ends waits for the end
    anyway. ``watch_deltas`` names a function it calls, on the loop, each time deltas went out,
    with the loop time (``loop.time()``) their window ends; the agent's side may then hand the
    deltas that come meanwhile over in one go then, instead of one by one
    (``agents/hermes/bridge.py``). ``None`` stops the calls."""

    def watch_deltas(self, on_window: Callable[[float], None] | None) -> None: ...


@runtime_checkable
class AgentBackend(Protocol):
    name: str

    async def run_turn(
        self, request: AgentRequest, sink: EventSink, cancel: CancelToken
    ) -> AgentResult: ...

    async def aclose(self) -> None: ...
