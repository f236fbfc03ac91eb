"""The offline, deterministic backend used in development and in every test that needs a turn.

It needs no network and no credentials, yet exercises everything a real backend does: streamed
deltas, reasoning and progress notes, tool calls, approval requests, failures, cancellation, and
durable steps (agents/steps.py). Marker tokens in the user text pick the behaviour, so an
end-to-end test can ask for exactly the event sequence it wants to check.

A turn with ``[tool:NAME]`` markers runs as an agent's does, one step at a time: a model call
(the first half of the reply streamed, then an assistant message asking for the first tool),
the tool call, a model call asking for the next tool, its call, …, and the last model call
streaming the rest of the reply. Each finished step is recorded through a ``StepSink``; a resumed
attempt skips what was recorded (no event again, no tool executed again) and declares a tool
that was in flight lost, unless it is read-only. Tool executions are counted in a ``ToolLog``
(``echo_tool_log``), so tests can see a second execution across processes.

Steers (``POST /v1/runs/{id}/steer``) land where Hermes puts them: at the next tool result, whose
content they are appended to (recorded again, naming the steers applied), and the reply shows
each one as ``(steered: <text>)``, so a test or a person sees it land; a turn without a tool
result left to come never applies one (it comes back as the run's ``pending_steer``). An
``execution_policy`` ``max_turns`` caps the model calls: the tools past it are not called and
the reply says ``(max_turns reached)``. ``[gate:PATH]`` holds the turn until the file exists (at
its tool calls, or mid-reply without tools): a state a test can act in without racing a clock.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

from .base import (
    AgentError,
    AgentRequest,
    AgentResult,
    ApprovalRequest,
    CancelToken,
    EventSink,
    NoteSink,
    TurnCancelled,
    Usage,
)
from .echo_tools import ToolLog, tool_call_message, tool_message
from .steps import (
    LOST_TOOL_RESULT,
    SteerSink,
    StepJournal,
    StepSink,
    model_step,
    rerun_when_lost,
    steered,
    tool_result,
    tool_started,
)

_THINK = re.compile(r"\[think\]")
_TOOL = re.compile(r"\[tool:([A-Za-z0-9_.-]+)\]")
_FAIL = re.compile(r"\[fail\]")
# Asks for consent to a fake command mid-reply; the rest of the reply says what was decided.
_APPROVE = re.compile(r"\[approve\]")
_SLOW = re.compile(r"\[slow(?::(\d+(?:\.\d+)?))?\]")
# A tool call that takes this long (default _SLOWTOOL_SECONDS), so a test can lose its worker
# while the tool runs.
_SLOWTOOL = re.compile(r"\[slowtool(?::(\d+(?:\.\d+)?))?\]")
_SLOWTOOL_SECONDS = 3.0
# The turn waits here until the file exists: at each tool call's work (a tool turn), or after
# the first half of its reply, so a test acts while the turn is in a state it cannot leave.
_GATE = re.compile(r"\[gate:([^\]\s]+)\]")
_GATE_POLL = 0.02
# Stops the reply at the "output limit": its first _LENGTH_TOKENS tokens, finish_reason length.
_LENGTH = re.compile(r"\[length\]")
_LENGTH_TOKENS = 3
_TOKEN = re.compile(r"\S+\s*")
# ``[slow]`` pads to this many tokens: 50 gaps of 0.2 s between them make the turn last >= 10 s,
# long enough for a test to stop it or kill its worker mid-stream.
_SLOW_MIN_TOKENS = 51
_SLOW_DELAY = 0.2
# What a steer appended to a tool result looks like, and what the reply shows of it.
STEER_MARK = "\n\n[steer from the user] "
MAX_TURNS_REACHED = " (max_turns reached)"


def message_text(content: Any) -> str:
    """Flatten a message's content (string or content-part list) to plain text.

    Images become ``[image]`` so their presence stays visible in the echo and in token counts.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces: list[str] = []
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict):
                kind = str(part.get("type", ""))
                if "image" in kind:
                    pieces.append("[image]")
                elif isinstance(part.get("text"), str):
                    pieces.append(part["text"])
        return " ".join(pieces)
    return str(content)


@dataclass
class _Turn:
    """One echo turn as its markers plan it, and the state of its run through the steps."""

    request: AgentRequest
    sink: EventSink
    cancel: CancelToken
    tools: list[str]
    text: str
    tokens: list[str]
    delay: float
    tool_seconds: float
    think: bool
    fail: bool
    approve: bool
    journal: StepJournal
    log: ToolLog
    messages: list[dict[str, Any]] = field(default_factory=list)
    decision: list[str] = field(default_factory=list)  # the approval's answer, last token
    # What the reply ends with: each steer applied, and whether max_turns cut the tools short.
    tail: list[str] = field(default_factory=list)
    gate: str = ""  # a file the turn waits for (``[gate:PATH]``)

    @property
    def steps(self) -> StepSink | None:
        return self.sink if isinstance(self.sink, StepSink) else None

    @property
    def half(self) -> int:
        # Never empty (it starts with "Echo: "); rounding up puts the midpoint after >= 1 delta.
        return (len(self.tokens) + 1) // 2

    @property
    def reasoning(self) -> str | None:
        return f"Thinking about: {self.text}" if self.think else None


class EchoBackend:
    """Echoes the user's text back as ``"Echo: <text>"``, token by token."""

    name = "echo"

    def __init__(self, token_delay: float = 0.0, tool_log: str = "") -> None:
        self.token_delay = token_delay
        self.tool_log = ToolLog(tool_log)

    async def run_turn(
        self, request: AgentRequest, sink: EventSink, cancel: CancelToken
    ) -> AgentResult:
        turn, cut = self._plan(request, sink, cancel)
        try:
            if turn.tools:
                await self._first_model_call(turn, with_tools=True)
                for number, tool in enumerate(turn.tools, start=1):
                    if number > 1:
                        await self._ask_for_tool(turn, number - 1, number, tool)
                    await self._call_tool(turn, f"call_{number}", tool)
                if turn.fail:
                    raise AgentError("echo backend failure requested")
                last = len(turn.tools)  # the model call that says the rest of the reply
                turn.log.model_call(request.run_id, last, request.attempt)
                rest = turn.tokens[turn.half :] + turn.decision + turn.tail
                await self._stream(turn, rest, first=False)
            else:
                await self._first_model_call(turn, with_tools=False)
        except TurnCancelled as stopped:
            raise TurnCancelled(str(stopped), turn.messages) from None
        return self._result(turn, cut)

    def _plan(
        self, request: AgentRequest, sink: EventSink, cancel: CancelToken
    ) -> tuple[_Turn, bool]:
        raw = message_text(request.message)
        slow, slowtool = _SLOW.search(raw), _SLOWTOOL.search(raw)
        cut = bool(_LENGTH.search(raw))
        gate = _GATE.search(raw)
        text = raw
        for marker in (_THINK, _TOOL, _FAIL, _SLOW, _SLOWTOOL, _APPROVE, _LENGTH, _GATE):
            text = marker.sub(" ", text)
        # Collapsing whitespace keeps the reply stable however the markers were spaced.
        text = " ".join(text.split())
        reply = f"Echo: {text}"
        if request.history:
            users = sum(1 for m in request.history if m.get("role") == "user")
            reply += f" (turn {users + 1})"
        delay = self.token_delay
        if slow:
            delay = float(slow.group(1)) if slow.group(1) else max(delay, _SLOW_DELAY)
            missing = _SLOW_MIN_TOKENS - len(_TOKEN.findall(reply))
            reply += " tick" * max(missing, 0)
        tokens = _TOKEN.findall(reply)
        if cut:
            tokens = tokens[:_LENGTH_TOKENS]
        tool_seconds = delay
        if slowtool:
            tool_seconds = float(slowtool.group(1)) if slowtool.group(1) else _SLOWTOOL_SECONDS
        tools, capped = _TOOL.findall(raw), []
        max_turns = request.limits.max_turns
        if max_turns is not None and len(tools) >= max_turns:  # a model call per tool, + 1
            tools, capped = tools[: max_turns - 1], [MAX_TURNS_REACHED]
        turn = _Turn(
            request=request,
            sink=sink,
            cancel=cancel,
            tools=tools,
            text=text,
            tokens=tokens,
            delay=delay,
            tool_seconds=tool_seconds,
            think=bool(_THINK.search(raw)),
            fail=bool(_FAIL.search(raw)),
            approve=bool(_APPROVE.search(raw)),
            journal=StepJournal.of(request.steps),
            log=self.tool_log,
            tail=capped,
            gate=gate.group(1) if gate else "",
        )
        return turn, cut

    async def _first_model_call(self, turn: _Turn, *, with_tools: bool) -> None:
        """Reasoning, the first half of the reply, the approval; then, in a tool turn, the
        message asking for the first tool (recorded: step 0); else the rest of the reply."""
        recorded = turn.journal.model(0)
        if recorded is not None:  # an earlier attempt finished it: nothing is said again
            turn.decision = list(recorded.get("decision") or [])
            turn.messages.append(recorded["message"])
            return
        turn.log.model_call(turn.request.run_id, 0, turn.request.attempt)
        reasoning = turn.reasoning
        if reasoning is not None:
            # The model's reasoning, and the agent's progress note about it (as Hermes tells
            # one before a reply's tools), for sinks that take notes.
            await _check(turn.cancel)
            await turn.sink.reasoning(reasoning)
            if isinstance(turn.sink, NoteSink):
                await turn.sink.thinking(reasoning)
        await self._stream(turn, turn.tokens[: turn.half], first=True)
        if turn.approve:
            # Decided mid-reply: the decision is the reply's last token.
            turn.decision = await _ask(turn.text, turn.sink, turn.cancel)
        if not with_tools:
            await _wait_for(turn.gate, turn.cancel)
            if turn.fail:
                raise AgentError("echo backend failure requested")
            rest = turn.tokens[turn.half :] + turn.decision + turn.tail
            await self._stream(turn, rest, first=False)
            return
        message = tool_call_message("call_1", turn.tools[0], {"query": turn.text})
        turn.messages.append(message)
        if turn.steps is not None:
            await turn.steps.step(model_step(0, message, decision=turn.decision))

    async def _ask_for_tool(self, turn: _Turn, index: int, number: int, tool: str) -> None:
        """A model call that only asks for the next tool (step ``index``)."""
        recorded = turn.journal.model(index)
        if recorded is not None:
            turn.messages.append(recorded["message"])
            return
        await _check(turn.cancel)
        turn.log.model_call(turn.request.run_id, index, turn.request.attempt)
        message = tool_call_message(f"call_{number}", tool, {"query": turn.text})
        turn.messages.append(message)
        if turn.steps is not None:
            await turn.steps.step(model_step(index, message))

    async def _call_tool(self, turn: _Turn, call_id: str, tool: str) -> None:
        """Run one tool call (its start and its result each recorded), unless an earlier
        attempt finished it; one in flight at that attempt's loss runs again only if it is
        read-only, else its result is that it was lost."""
        journal, sink, steps = turn.journal, turn.sink, turn.steps
        recorded = journal.result(call_id)
        if recorded is not None:
            turn.messages.append(recorded["message"])
            turn.tail += [f" (steered: {text})" for text in recorded.get("steer_texts") or ()]
            return
        args = {"query": turn.text}
        in_flight = journal.in_flight(call_id)
        if in_flight and not rerun_when_lost(tool):
            await sink.tool_completed(tool, call_id, error=True, result=LOST_TOOL_RESULT)
            message = tool_message(call_id, tool, LOST_TOOL_RESULT)
            turn.messages.append(message)
            if steps is not None:
                await steps.step(tool_result(call_id, tool, message, lost=True))
            return
        await _check(turn.cancel)
        started = time.monotonic()
        if not in_flight:  # its start (and event) stand from the attempt that was lost
            await sink.tool_started(tool, call_id, preview=f"{tool} preview", args=args)
            if steps is not None:
                await steps.step(tool_started(call_id, tool, args))
        attempt, run_id = turn.request.attempt, turn.request.run_id
        turn.log.started(run_id, call_id, tool, attempt)
        await _wait_for(turn.gate, turn.cancel)
        await _pause(turn.cancel, turn.tool_seconds)  # the "work": real, stoppable durations
        turn.log.ended(run_id, call_id, tool, attempt)
        duration = time.monotonic() - started
        await sink.tool_completed(tool, call_id, duration=duration, error=False, result="ok")
        message = tool_message(call_id, tool, "ok")
        turn.messages.append(message)
        if steps is not None:
            await steps.step(tool_result(call_id, tool, message))
            await self._apply_steers(turn, steps, call_id, tool)

    async def _apply_steers(self, turn: _Turn, steps: StepSink, call_id: str, tool: str) -> None:
        """The tool-result boundary: the steers pending (as of the result just recorded) are
        appended to the result, which is recorded again naming them, and the reply shows them."""
        if not isinstance(turn.sink, SteerSink) or not (pending := turn.sink.steers):
            return
        texts = [steer.text for steer in pending]
        message = turn.messages[-1]
        content = str(message["content"]) + "".join(STEER_MARK + text for text in texts)
        message = tool_message(call_id, tool, content)
        turn.messages[-1] = message
        turn.tail += [f" (steered: {text})" for text in texts]
        record = {**tool_result(call_id, tool, message), "steer_texts": texts}
        await steps.step(steered(record, pending))

    async def _stream(self, turn: _Turn, tokens: list[str], *, first: bool) -> None:
        for index, token in enumerate(tokens):
            if index or not first:
                await _pause(turn.cancel, turn.delay)
            await _check(turn.cancel)
            await turn.sink.delta(token)

    def _result(self, turn: _Turn, cut: bool) -> AgentResult:
        tokens = turn.tokens + turn.decision + turn.tail
        output = "".join(tokens)
        final: dict[str, Any] = {"role": "assistant", "content": output, "timestamp": time.time()}
        if turn.reasoning is not None:
            final["reasoning"] = turn.reasoning
        request = turn.request
        history_words = sum(len(message_text(m.get("content")).split()) for m in request.history)
        raw_words = len(message_text(request.message).split())
        return AgentResult(
            output=output,
            usage=Usage(input_tokens=history_words + raw_words, output_tokens=len(tokens)),
            messages=[*turn.messages, final],
            runtime={
                "provider": request.route.provider or "echo",
                "model": request.route.model or "echo",
            },
            finish_reason="length" if cut else "stop",
        )

    async def aclose(self) -> None:
        """Nothing to release: the echo backend holds no connections."""


async def _ask(text: str, sink: EventSink, cancel: CancelToken) -> list[str]:
    """Request approval of a harmless fake command; the reply's tail reports the decision."""
    await _check(cancel)
    choice = await sink.approval(
        ApprovalRequest(
            command=f"echo {text!r}",
            description="echo backend: approval requested by the [approve] marker",
            pattern_key="echo",
        )
    )
    if choice == "deny":
        return [" (command denied)"]
    return [f" (command approved: {choice})"]


async def _check(cancel: CancelToken) -> None:
    """Raise if stopped; checked before every event so a stop lands even with no delay."""
    if cancel.cancelled:
        raise TurnCancelled(cancel.reason)


async def _wait_for(path: str, cancel: CancelToken) -> None:
    """Wait (stoppably) until the file ``path`` exists; no path: go on."""
    while path and not await asyncio.to_thread(os.path.exists, path):
        await cancel.sleep(_GATE_POLL)


async def _pause(cancel: CancelToken, delay: float) -> None:
    """Wait between tokens; with no delay still yield, so a stopping task gets to run."""
    if delay > 0:
        await cancel.sleep(delay)
    else:
        await asyncio.sleep(0)
        await _check(cancel)
