"""The offline, deterministic backend used in development and in every test that needs a turn.

It needs no network and no credentials, yet exercises everything a real backend does: streamed
deltas, reasoning and progress notes, tool call pairs, approval requests, failures and
cancellation. Marker tokens
in the user text pick the behaviour, so an end-to-end test can ask for exactly the event
sequence it wants to check.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
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

_THINK = re.compile(r"\[think\]")
_TOOL = re.compile(r"\[tool:([A-Za-z0-9_.-]+)\]")
_FAIL = re.compile(r"\[fail\]")
# Asks for consent to a fake command mid-reply; the rest of the reply says what was decided.
_APPROVE = re.compile(r"\[approve\]")
_SLOW = re.compile(r"\[slow(?::(\d+(?:\.\d+)?))?\]")
# Stops the reply at the "output limit": its first _LENGTH_TOKENS tokens, finish_reason length.
_LENGTH = re.compile(r"\[length\]")
_LENGTH_TOKENS = 3
_TOKEN = re.compile(r"\S+\s*")
# ``[slow]`` pads to this many tokens: 50 gaps of 0.2 s between them make the turn last >= 10 s,
# long enough for a test to stop it or kill its worker mid-stream.
_SLOW_MIN_TOKENS = 51
_SLOW_DELAY = 0.2


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


class EchoBackend:
    """Echoes the user's text back as ``"Echo: <text>"``, token by token."""

    name = "echo"

    def __init__(self, token_delay: float = 0.0) -> None:
        self.token_delay = token_delay

    async def run_turn(
        self, request: AgentRequest, sink: EventSink, cancel: CancelToken
    ) -> AgentResult:
        raw = message_text(request.message)
        tools = _TOOL.findall(raw)
        think = bool(_THINK.search(raw))
        fail = bool(_FAIL.search(raw))
        slow = _SLOW.search(raw)
        approve = bool(_APPROVE.search(raw))
        cut = bool(_LENGTH.search(raw))
        text = raw
        for marker in (_THINK, _TOOL, _FAIL, _SLOW, _APPROVE, _LENGTH):
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
        # Never empty (it starts with "Echo: "); rounding up puts the midpoint after >= 1 delta.
        half = (len(tokens) + 1) // 2

        messages: list[dict[str, Any]] = []
        reasoning: str | None = None
        if think:
            # The model's reasoning, and the agent's progress note about it (as Hermes tells
            # one before a reply's tools), for sinks that take notes.
            reasoning = f"Thinking about: {text}"
            await _check(cancel)
            await sink.reasoning(reasoning)
            if isinstance(sink, NoteSink):
                await sink.thinking(reasoning)

        try:
            for index, token in enumerate(tokens):
                if index:
                    await _pause(cancel, delay)
                await _check(cancel)
                await sink.delta(token)
                if index + 1 == half:
                    if approve:
                        # Decided mid-reply: the decision is appended as the reply's last token
                        # (the loop goes on over the grown list).
                        tokens += await _ask(text, sink, cancel)
                    await self._tools(tools, text, sink, cancel, delay, messages)
                    if fail:
                        raise AgentError("echo backend failure requested")
        except TurnCancelled as stopped:
            raise TurnCancelled(str(stopped), messages) from None

        output = "".join(tokens)
        final: dict[str, Any] = {"role": "assistant", "content": output, "timestamp": time.time()}
        if reasoning is not None:
            final["reasoning"] = reasoning
        messages.append(final)
        history_words = sum(len(message_text(m.get("content")).split()) for m in request.history)
        return AgentResult(
            output=output,
            usage=Usage(input_tokens=history_words + len(raw.split()), output_tokens=len(tokens)),
            messages=messages,
            runtime={
                "provider": request.route.get("provider") or "echo",
                "model": request.route.get("model") or "echo",
            },
            finish_reason="length" if cut else "stop",
        )

    async def _tools(
        self,
        tools: list[str],
        text: str,
        sink: EventSink,
        cancel: CancelToken,
        delay: float,
        messages: list[dict[str, Any]],
    ) -> None:
        """Emit one started/completed pair per ``[tool:NAME]`` and record it in the transcript."""
        for number, tool in enumerate(tools, start=1):
            call_id = f"call_{number}"
            args = {"query": text}
            await _check(cancel)
            started = time.monotonic()
            await sink.tool_started(tool, call_id, preview=f"{tool} preview", args=args)
            await _pause(cancel, delay)  # the "work", so durations are real and stoppable
            duration = time.monotonic() - started
            await sink.tool_completed(tool, call_id, duration=duration, error=False, result="ok")
            call = {"name": tool, "arguments": json.dumps(args)}
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": call_id, "type": "function", "function": call}],
                    "timestamp": time.time(),
                }
            )
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "tool_name": tool,
                    "content": "ok",
                    "timestamp": time.time(),
                }
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


async def _pause(cancel: CancelToken, delay: float) -> None:
    """Wait between tokens; with no delay still yield, so a stopping task gets to run."""
    if delay > 0:
        await cancel.sleep(delay)
    else:
        await asyncio.sleep(0)
        await _check(cancel)
