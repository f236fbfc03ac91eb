"""What the fake LLM (``fake_llm.py``) answers: the markers it reads in a request, the reply they
ask for, and the OpenAI-shaped bodies it sends. Pure functions of the request."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from aiohttp import web

REASONING = re.compile(r"\[reasoning\]")
TOOLCALL = re.compile(r"\[toolcall:([A-Za-z0-9_.-]+)\]")
TERMINAL = re.compile(r"\[terminal:([^\]]+)\]")
DELEGATE = re.compile(r"\[delegate:([^\]]+)\]")
ERROR = re.compile(r"\[error:(\d{3})\]")
FLAKY = re.compile(r"\[flaky:(\d+)\]")
STALL = re.compile(r"\[stall\]")
MIDFAIL = re.compile(r"\[midfail\]")
LENGTH = re.compile(r"\[length\]")
CALLS = re.compile(r"\[calls:(\d+)\]")
_MARKERS = (REASONING, TOOLCALL, TERMINAL, DELEGATE, ERROR, FLAKY, STALL, MIDFAIL, LENGTH, CALLS)
# How many tokens a ``[length]`` reply keeps before its finish_reason "length".
LENGTH_TOKENS = 3
_TOKEN = re.compile(r"\S+\s*")
# An agent's own note in a user message (Hermes: "[System: Your previous response was ...]").
_AGENT_NOTE = re.compile(r"\s*\[System:")

# The fixed reply (benchmarks): 19 words, then this marker and the number of user messages the
# request carried, so a client can tell the server sent the conversation's history along:
# "... BENCH-REPLY-OK-u3" for the third turn of a conversation. 20 tokens.
FIXED_MARKER = "BENCH-REPLY-OK-u"
FIXED_WORDS = [f"w{i} " for i in range(19)]


@dataclass
class Reply:
    """What one chat request gets: content tokens, reasoning tokens, a tool call (name, JSON
    arguments, its number in the turn's tool loop) and the finish reason."""

    tokens: list[str]
    reasoning: list[str]
    tool: tuple[str, str, int] | None
    finish: str


def text_of(content: Any) -> str:
    """Plain text of a message's content (a string or a list of content parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict)
        ).strip()
    return ""


def last_user_text(messages: list[Any]) -> str:
    """The text the markers are read in: the last user message's, or, when that is an agent's
    request to continue a ``[length]`` reply, the message it continues."""
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    text = text_of(users[-1].get("content")) if users else ""
    return _continued_length_turn(users) or text


def marked_reply(messages: list[Any], text: str, scan: str) -> Reply:
    """The reply ``scan`` (the directive and ``text``) asks for."""
    reasoning = _TOKEN.findall(f"Thinking about: {clean(text)}") if REASONING.search(scan) else []
    last = messages[-1] if messages else {}
    results = _results_since_user(messages)
    loop = CALLS.search(scan)
    wanted = int(loop.group(1)) if loop else 1
    came_back = isinstance(last, dict) and last.get("role") == "tool"
    if came_back and results >= wanted:  # an agent's tool loop came back, and is done
        words = text_of(last.get("content")).split()[:12]
        return Reply(_TOKEN.findall(f"Tool said: {' '.join(words)}"), reasoning, None, "stop")
    tool = _tool_call(scan, text, results + 1)
    if came_back:  # the loop goes on ([calls:N]): a step of its own, then the next call
        return Reply(_TOKEN.findall(f"Step {results + 1}."), reasoning, tool, "tool_calls")
    tokens = _TOKEN.findall(reply_for(text))
    if LENGTH.search(scan):
        return Reply(tokens[:LENGTH_TOKENS], reasoning, None, "length")
    return Reply(tokens, reasoning, tool, "tool_calls" if tool else "stop")


def reply_for(text: str) -> str:
    """The deterministic reply text for a user message (markers stripped)."""
    return f"You said: {clean(text)}"


def fixed_reply(messages: list[Any]) -> Reply:
    users = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "user")
    return Reply([*FIXED_WORDS, f"{FIXED_MARKER}{users}"], [], None, "stop")


def usage_of(messages: list[Any], reply: Reply) -> dict[str, int]:
    prompt = sum(len(text_of(m.get("content")).split()) for m in messages if isinstance(m, dict))
    completion = len(reply.tokens) + len(reply.reasoning)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def tool_set(body: dict[str, Any]) -> str:
    """``tools=N:<hash of the names>``: which tools the agent offered the model."""
    names = tool_names(body)
    digest = hashlib.sha256(",".join(names).encode()).hexdigest()[:8]
    return f"tools={len(names)}:{digest}"


def tool_names(body: dict[str, Any]) -> list[str]:
    return sorted(str((tool.get("function") or {}).get("name")) for tool in body.get("tools") or [])


def clean(text: str) -> str:
    """``text`` without markers, its whitespace collapsed."""
    for marker in _MARKERS:
        text = marker.sub(" ", text)
    return " ".join(text.split())


def call(name: str, arguments: str, number: int = 1) -> dict[str, Any]:
    return {
        "id": f"call_fake_{number}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def error(
    status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None
) -> web.Response:
    """An OpenAI-shaped error body, so backends can surface the provider's own message."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": code}},
        status=status,
        headers=headers,
    )


def _tool_call(scan: str, text: str, number: int) -> tuple[str, str, int] | None:
    """The (name, JSON arguments, call number) of the tool call a marker asks for, if any."""
    if command := TERMINAL.search(scan):
        return "terminal", json.dumps({"command": command.group(1)}), number
    if goal := DELEGATE.search(scan):
        return "delegate_task", json.dumps({"goal": goal.group(1).strip()}), number
    if tool := TOOLCALL.search(scan):
        return tool.group(1), json.dumps({"query": clean(text)}), number
    return None


def _results_since_user(messages: list[Any]) -> int:
    """Tool results after the conversation's last user message: the agent's loop so far."""
    count = 0
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") == "user":
            break
        count += message.get("role") == "tool"
    return count


def _continued_length_turn(users: list[dict[str, Any]]) -> str | None:
    """The user's ``[length]`` message when the last user message is an agent's note asking to
    continue a truncated reply (``[System: ...]``, as Hermes sends after ``finish_reason:
    "length"``): the continuation is truncated too, as a real output limit would be."""
    texts = [text_of(m.get("content")) for m in users]
    if not texts or not _AGENT_NOTE.match(texts[-1]):
        return None
    asked = next((t for t in reversed(texts) if not _AGENT_NOTE.match(t)), "")
    return asked if LENGTH.search(asked) else None
