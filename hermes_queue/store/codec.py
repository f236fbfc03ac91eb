"""Conversion between Python values and the columns both SQL dialects store.

Kept apart from the queries so the rules for what goes into a column (JSON for structured
values, a flag for content-part lists, decoded rows as dataclasses) are in one place and
identical on both backends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from hermes_queue.store.base import (
    BRANCH_MARKER,
    DELEGATE_MARKER,
    END_REASON_COMPRESSION,
    MessageRow,
    SessionRow,
    make_preview,
)


def json_or_none(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def text_or_json(value: Any) -> str | None:
    """Optional text column: strings stay (NUL-free), anything else is stored as JSON."""
    if value is None:
        return None
    return no_nul(value) if isinstance(value, str) else json.dumps(value)


def no_nul(text: str) -> str:
    """PostgreSQL text cannot hold NUL (a tool output may); replace it on both backends so a
    transcript reads back the same whatever the store."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def loads_json(text: str | None) -> Any:
    """Decode a JSON column; a value that is not JSON is returned raw rather than lost."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def decode_content(content: str | None, is_json: Any) -> Any:
    return loads_json(content) if is_json else content


def text_of(content: Any) -> str:
    """The plain text of a message content (a string, or the text parts of a part list)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return " ".join(p for p in parts if isinstance(p, str) and p)
    return ""


def tool_call_count(tool_calls: Any) -> int:
    if isinstance(tool_calls, list):
        return len(tool_calls)
    return 1 if tool_calls else 0


# A message's own columns (what a fork copies); MESSAGE_COLUMNS adds the owner.
MESSAGE_DATA_COLUMNS = (
    "role, content, content_json, tool_call_id, tool_calls, tool_name, timestamp, "
    "token_count, finish_reason, reasoning, reasoning_content"
)
MESSAGE_COLUMNS = "session_id, " + MESSAGE_DATA_COLUMNS


def encode_message(
    session_id: str, message: Mapping[str, Any], turn_key: str | None
) -> tuple[Any, ...]:
    """One message dict → the parameter tuple for INSERT (``MESSAGE_COLUMNS`` + turn_key).

    Content-part lists are stored as JSON with ``content_json = 1``; a flag column rather than
    upstream's NUL-byte prefix, because PostgreSQL text cannot hold NUL.
    """
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise ValueError("every message needs a non-empty string 'role'")
    content = message.get("content")
    is_json = content is not None and not isinstance(content, str)
    token_count = message.get("token_count")
    timestamp = message.get("timestamp")
    return (
        session_id,
        role,
        json_or_none(content) if is_json else text_or_json(content),
        1 if is_json else 0,
        text_or_json(message.get("tool_call_id")),
        text_or_json(message.get("tool_calls")),
        text_or_json(message.get("tool_name")),
        float(timestamp) if timestamp is not None else time.time(),
        int(token_count) if token_count is not None else None,
        text_or_json(message.get("finish_reason")),
        text_or_json(message.get("reasoning")),
        text_or_json(message.get("reasoning_content")),
        turn_key,
    )


def session_from_row(row: Mapping[str, Any]) -> SessionRow:
    preview: str | None = None
    if "first_user_content" in row:
        first = decode_content(row["first_user_content"], row.get("first_user_json"))
        preview = make_preview(text_of(first))
    return SessionRow(
        id=row["id"],
        source=row["source"],
        user_id=row["user_id"],
        session_key=row["session_key"],
        model=row["model"],
        model_config=loads_json(row["model_config"]),
        system_prompt=row["system_prompt"],
        parent_session_id=row["parent_session_id"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        end_reason=row["end_reason"],
        title=row["title"],
        message_count=row["message_count"],
        tool_call_count=row["tool_call_count"],
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        cache_read_tokens=row["cache_read_tokens"],
        cache_write_tokens=row["cache_write_tokens"],
        reasoning_tokens=row["reasoning_tokens"],
        estimated_cost_usd=row["estimated_cost_usd"],
        actual_cost_usd=row["actual_cost_usd"],
        api_call_count=row["api_call_count"],
        archived=bool(row["archived"]),
        last_active=row.get("last_active"),
        preview=preview,
        tenant=row.get("tenant") or "default",
    )


def message_from_row(row: Mapping[str, Any]) -> MessageRow:
    return MessageRow(
        id=row["id"],
        session_id=row["session_id"],
        role=row["role"],
        content=decode_content(row["content"], row["content_json"]),
        tool_call_id=row["tool_call_id"],
        tool_calls=loads_json(row["tool_calls"]),
        tool_name=row["tool_name"],
        timestamp=row["timestamp"],
        token_count=row["token_count"],
        finish_reason=row["finish_reason"],
        reasoning=row["reasoning"],
        reasoning_content=row["reasoning_content"],
        turn_key=row.get("turn_key"),
    )


def pick_continuation(children: list[dict[str, Any]]) -> str | None:
    """The compression continuation among a session's children (rows newest first), or None.

    Forks, delegated sub-agents and tool sessions are children too but not continuations;
    among the rest, a child that is itself compression-ended or still live wins.
    """
    eligible = []
    for child in children:
        config = loads_json(child["model_config"])
        if isinstance(config, dict) and (BRANCH_MARKER in config or DELEGATE_MARKER in config):
            continue
        if child["source"] == "tool":
            continue
        eligible.append(child)
    preferred = [
        c for c in eligible if c["end_reason"] == END_REASON_COMPRESSION or c["ended_at"] is None
    ]
    chosen = preferred or eligible
    return str(chosen[0]["id"]) if chosen else None
