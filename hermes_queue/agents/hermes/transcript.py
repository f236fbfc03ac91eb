"""Messages between the session store's shape and Hermes' conversation shape."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

_CALL_KEYS = ("id", "type", "function")


def to_hermes_history(history: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored messages as Hermes' ``conversation_history`` (client-only keys stay behind)."""
    out: list[dict[str, Any]] = []
    for item in history:
        role = item.get("role")
        if not role:
            continue
        message: dict[str, Any] = {"role": role, "content": item.get("content") or ""}
        if item.get("tool_calls"):
            message["tool_calls"] = item["tool_calls"]
        if item.get("tool_call_id"):
            message["tool_call_id"] = item["tool_call_id"]
        if role == "tool" and item.get("tool_name"):
            message["name"] = item["tool_name"]
        if item.get("reasoning"):
            message["reasoning"] = item["reasoning"]
        out.append(message)
    return out


def turn_messages(
    conversation: Sequence[dict[str, Any]], history_length: int
) -> list[dict[str, Any]]:
    """This turn's assistant and tool messages, in the store's client-safe shape.

    Hermes returns the whole conversation: the history it was given, the user turn, then what
    the turn added. When it compressed the history meanwhile the positions shift, so the turn
    then starts after the last real user message.
    """
    start = history_length + 1
    if len(conversation) <= history_length or conversation[history_length].get("role") != "user":
        users = [i for i, m in enumerate(conversation) if m.get("role") == "user"]
        start = users[-1] + 1 if users else 0
    now = time.time()
    out = []
    for message in conversation[start:]:
        role = message.get("role")
        if role == "assistant":
            out.append(_assistant(message, now))
        elif role == "tool":
            out.append(
                {
                    "role": "tool",
                    "content": _text(message.get("content")),
                    "tool_call_id": message.get("tool_call_id") or "",
                    "tool_name": message.get("tool_name") or message.get("name") or "",
                    "timestamp": now,
                }
            )
    return out


def _assistant(message: dict[str, Any], now: float) -> dict[str, Any]:
    out: dict[str, Any] = {
        "role": "assistant",
        "content": _text(message.get("content")),
        "timestamp": now,
    }
    calls = [
        {key: call[key] for key in _CALL_KEYS if key in call}
        for call in message.get("tool_calls") or []
        if isinstance(call, dict)
    ]
    if calls:
        out["tool_calls"] = calls
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        out["reasoning"] = reasoning
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)
