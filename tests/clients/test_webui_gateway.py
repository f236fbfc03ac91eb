"""hermes-webui's gateway chat client must keep receiving a reasoning turn's reasoning text on
the build the strict client passes on (issue #21): whatever shape reasoning takes for the
strict client, the webui must still find it.

``read_gateway_stream`` is our own reader of a chat-completions stream that applies the rules
hermes-webui's gateway bridge applies (``api/gateway_chat.py``, its chat-completions path):
lines are trimmed; a blank line resets the event name to ``message``; ``event:`` names the next
data; other non-``data:`` lines (comments, ids) are skipped; ``data: [DONE]`` ends the stream;
undecodable data is skipped. A ``hermes.tool.progress`` frame is a tool start/completion, or
reasoning when its tool is ``_thinking`` (its ``text``/``preview``/``delta``/``content``);
other ``_`` tools are ignored. A ``reasoning.available`` frame is reasoning (same fields). Any
other frame: ``error`` marks the turn failed, ``choices[0].delta.reasoning_content`` (not
blank) is reasoning, ``delta.content`` (else ``message.content``) is text, ``usage`` is kept.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.clients.harness import Stack

pytestmark = pytest.mark.timeout(150)

_NOTE_FIELDS = ("text", "preview", "delta", "content")


@dataclass
class GatewayView:
    """What the webui takes from one chat-completions stream."""

    text: str = ""
    reasoning: str = ""
    tools: list[tuple[str, str]] = field(default_factory=list)  # ("started"/"completed", name)
    usage: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    done: bool = False


def _note(payload: dict[str, Any]) -> str:
    """The first non-blank text field of a progress or reasoning payload."""
    for name in _NOTE_FIELDS:
        value = payload.get(name)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def _tool_frame(view: GatewayView, payload: dict[str, Any]) -> None:
    name = str(payload.get("tool") or payload.get("name") or payload.get("function_name") or "")
    name = name.strip()
    if name == "_thinking":
        view.reasoning += _note(payload)
    elif name and not name.startswith("_"):
        status = str(payload.get("status") or "running").strip().lower()
        done = status in {"completed", "complete", "success", "error", "failed"}
        view.tools.append(("completed" if done else "started", name))


def _chunk(view: GatewayView, payload: dict[str, Any]) -> None:
    if payload.get("error"):
        view.error = str(payload["error"])
    choices = payload.get("choices") or []
    choice = (choices[0] or {}) if choices else {}
    delta, message = choice.get("delta") or {}, choice.get("message") or {}
    reasoning = delta.get("reasoning_content")
    if not (isinstance(reasoning, str) and reasoning.strip()):
        reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning.strip():
        view.reasoning += reasoning
    content = delta.get("content")
    if not isinstance(content, str):
        content = message.get("content")
    if isinstance(content, str):
        view.text += content
    if isinstance(payload.get("usage"), dict):
        view.usage.update(payload["usage"])


def read_gateway_stream(lines: Iterable[str]) -> GatewayView:
    view = GatewayView()
    event = "message"
    for raw in lines:
        line = raw.strip()
        if not line:
            event = "message"
            continue
        if line.startswith("event:"):
            event = line[len("event:") :].strip() or "message"
            continue
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            view.done = True
            break
        try:
            payload = json.loads(data)
        except ValueError:
            continue
        if not isinstance(payload, dict):
            continue
        if event == "hermes.tool.progress":
            _tool_frame(view, payload)
            event = "message"
        elif event == "reasoning.available":
            view.reasoning += _note(payload)
            event = "message"
        else:
            _chunk(view, payload)
    return view


def test_the_reader_follows_the_webui_rules() -> None:
    frames = [
        ": keepalive",
        "",
        'data: {"choices": [{"delta": {"role": "assistant"}, "finish_reason": null}]}',
        "",
        'data: {"choices": [{"delta": {"reasoning_content": "Hmm, "}, "finish_reason": null}]}',
        "",
        "event: reasoning.available",
        'data: {"text": "noted. "}',
        "",
        "event: hermes.tool.progress",
        'data: {"tool": "_thinking", "preview": "pondering"}',
        "",
        "event: hermes.tool.progress",
        'data: {"tool": "search", "toolCallId": "c1", "status": "running"}',
        "",
        "id: 5-0",
        'data: {"choices": [{"delta": {"content": "Hi"}, "finish_reason": null}]}',
        "",
        'data: {"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": {"total_tokens": 3}}',
        "",
        "data: [DONE]",
        "",
        'data: {"choices": [{"delta": {"content": "after done"}}]}',
    ]
    view = read_gateway_stream(frames)
    assert view.reasoning == "Hmm, noted. pondering"
    assert view.text == "Hi" and view.tools == [("started", "search")]
    assert view.usage == {"total_tokens": 3} and view.done and not view.error


async def test_webui_gateway_client_receives_the_reasoning_text(stack: Stack) -> None:
    """A reasoning turn as hermes-webui's gateway bridge asks it (session headers, its own
    system prompt, ``model: default``): the reply and the reasoning both reach it."""
    session_id = f"webui-{uuid.uuid4().hex[:12]}"
    text = f"think it over {stack.backend.reasoning}"
    headers = {
        "Accept": "text/event-stream",
        "X-Hermes-Session-Id": session_id,
        "X-Hermes-Session-Key": f"webui:{session_id}",
    }
    body = {
        "model": "default",
        "stream": True,
        "messages": [
            {"role": "system", "content": "You are chatting through the WebUI."},
            {"role": "user", "content": text},
        ],
    }
    url = f"{stack.url}/v1/chat/completions"
    async with stack.session.post(url, json=body, headers=headers) as response:
        raw = await asyncio.wait_for(response.text(), 30)
        status = response.status
    view = read_gateway_stream(raw.splitlines())
    seen = f"\nHTTP {status}; the stream:\n{raw}"
    assert status == 200, seen
    assert view.done and not view.error, f"{view}{seen}"
    assert view.text == stack.reply(text), f"{view}{seen}"
    assert "Thinking about: think it over" in view.reasoning, f"no reasoning text: {view}{seen}"
