"""The traced attempt a piece of worker code runs for, and what that code may ask of it.

The job's task sets it (``attempts.TurnTrace.enter``) right after the claim; the agent's threads
and the sink's tasks inherit it with the context, so a hook deep in a backend asks
:func:`current_turn` rather than being handed a tracer. Only :class:`TurnSpans` is known here,
nothing of OpenTelemetry: an untraced process imports this module and no SDK.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class ModelCallSpan(Protocol):
    """One model request's span: ``first_chunk()``, then ``answered(...)`` or ``failed(...)``."""

    def first_chunk(self) -> None: ...

    def answered(
        self,
        input_tokens: int | None,
        output_tokens: int | None,
        *,
        model: Any = None,
        finish_reasons: list[str] | None = None,
    ) -> None: ...

    def failed(self, error_type: str) -> None: ...


class TurnSpans(Protocol):
    """The spans an attempt's hooks open: tools (the sink), approval waits, model calls."""

    def tool_started(self, name: str, call_id: str) -> None: ...

    def tool_completed(self, name: str, call_id: str, error: bool) -> None: ...

    async def approval_wait(self, waiting: Awaitable[str]) -> str: ...

    def model_call(self, model: str = "") -> ModelCallSpan: ...

    def model_calls(self, call: Callable[..., T], *, streaming: bool) -> Callable[..., T]: ...


turn_var: contextvars.ContextVar[TurnSpans | None] = contextvars.ContextVar(
    "hermes_queue_turn_trace", default=None
)


def current_turn() -> TurnSpans | None:
    """The traced attempt this code runs for, if any."""
    return turn_var.get()
