"""Messages between the session store's shape and Hermes' conversation shape."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hermes_queue.store.base import MESSAGE_PUBLIC_KEYS


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
    """This turn's assistant and tool messages as Hermes made them, in the client-safe shape
    (upstream's message projection): ``content`` as the agent left it, ``tool_calls`` whole
    (with Hermes' ``call_id`` / ``response_item_id``), ``finish_reason``, ``reasoning`` and
    ``reasoning_content`` when the agent set them. Upstream's API server shows exactly these
    on ``run.completed`` and its agent stores them; the store stamps each with its time.

    Hermes returns the whole conversation: the history it was given, the user turn, then what
    the turn added. When it compressed the history meanwhile the positions shift, so the turn
    then starts after the last real user message.
    """
    start = history_length + 1
    if len(conversation) <= history_length or conversation[history_length].get("role") != "user":
        users = [i for i, m in enumerate(conversation) if m.get("role") == "user"]
        start = users[-1] + 1 if users else 0
    return [
        {key: message[key] for key in MESSAGE_PUBLIC_KEYS if key in message}
        for message in conversation[start:]
        if message.get("role") in ("assistant", "tool")
    ]
