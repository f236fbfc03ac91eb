"""Renderers: one canonical event in, the frames of one endpoint's dialect out.

Each function is pure and stateless, so a resumed stream renders exactly what the first
connection would have, on any replica.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hermes_queue.api.sse import Frame
from hermes_queue.events import SUBAGENT_FIELDS, EventType, RunEvent, message_id_for


def render_runs(event: RunEvent) -> Iterable[Frame]:
    """Upstream ``/v1/runs/{id}/events`` (HERMES_API §3.3): unnamed frames with ``event``.

    ``run.restarted`` and ``stream.gap`` are additions: a retried attempt tells clients to drop
    the partial output they have, and a trimmed stream is never skipped silently.
    """
    data = event.data
    fields: dict[str, Any]
    match event.type:
        case EventType.MESSAGE_DELTA:
            fields = {"delta": data.get("delta", "")}
        case EventType.REASONING:
            fields = {"text": data.get("text", "")}
        case EventType.TOOL_STARTED:
            fields = {"tool": data.get("tool"), "preview": data.get("preview")}
        case EventType.TOOL_COMPLETED:
            fields = {
                "tool": data.get("tool"),
                "duration": data.get("duration", 0.0),
                "error": bool(data.get("error")),
            }
        case EventType.APPROVAL_REQUEST | EventType.APPROVAL_RESPONDED:
            fields = dict(data)
        case EventType.SUBAGENT_START | EventType.SUBAGENT_COMPLETE:
            fields = {name: data[name] for name in SUBAGENT_FIELDS if name in data}
        case EventType.RUN_COMPLETED:
            fields = {"output": data.get("output", ""), "usage": data.get("usage", {})}
        case EventType.RUN_FAILED:
            fields = {"error": data.get("error", "run failed")}
            if data.get("reason"):
                fields["reason"] = data["reason"]
        case EventType.RUN_CANCELLED:
            fields = {}
        case EventType.RUN_RESTARTED:
            fields = {"attempt": data.get("attempt", event.attempt)}
        case EventType.STREAM_GAP:
            fields = dict(data)
        case _:
            return ()
    payload = {"event": str(event.type), "run_id": event.run_id, "timestamp": event.ts, **fields}
    return ((None, payload),)


def render_session(event: RunEvent) -> Iterable[Frame]:
    """Upstream's session chat stream (HERMES_API §3.1): named frames, each payload carrying
    ``session_id``, ``run_id``, ``seq`` and ``ts``; a terminal event closes with ``done``.

    Subagent events are not rendered: upstream forwards them on the runs stream only."""
    data, message_id = event.data, message_id_for(event.run_id)
    frames: list[tuple[str, dict[str, Any]]]
    match event.type:
        case EventType.RUN_STARTED:
            frames = [
                (
                    "run.started",
                    {"user_message": data.get("user_message"), "runtime": data.get("runtime", {})},
                )
            ]
        case EventType.MESSAGE_STARTED:
            frames = [("message.started", {"message": {"id": message_id, "role": "assistant"}})]
        case EventType.MESSAGE_DELTA:
            frames = [("assistant.delta", {"message_id": message_id, "delta": data.get("delta")})]
        case EventType.REASONING:
            frames = [
                (
                    "tool.progress",
                    {"message_id": message_id, "tool_name": "_thinking", "delta": data.get("text")},
                )
            ]
        case EventType.TOOL_STARTED:
            frames = [("tool.started", _tool_fields(message_id, data, keep_details=True))]
        case EventType.TOOL_COMPLETED:
            name = "tool.failed" if data.get("error") else "tool.completed"
            frames = [(name, _tool_fields(message_id, data, keep_details=False))]
        case EventType.APPROVAL_REQUEST | EventType.APPROVAL_RESPONDED:
            frames = [(str(event.type), {"message_id": message_id, **data})]
        case EventType.RUN_COMPLETED:
            frames = _completed_frames(message_id, data)
        case EventType.RUN_FAILED if is_controlled_reply(data):
            # Upstream answers a provider-auth failure as an ordinary reply (HERMES_API §6.4).
            frames = _completed_frames(message_id, controlled_reply(data))
        case EventType.RUN_FAILED:
            frames = [("error", {"message": data.get("error", "run failed")}), ("done", {})]
        case EventType.RUN_CANCELLED:
            frames = [("run.cancelled", {"message_id": message_id}), ("done", {})]
        case EventType.RUN_RESTARTED | EventType.STREAM_GAP:
            frames = [(str(event.type), dict(data))]
        case _:
            return ()
    common = {
        "session_id": event.session_id,
        "run_id": event.run_id,
        "seq": event.seq,
        "ts": event.ts,
    }
    return [(name, {**payload, **common}) for name, payload in frames]


def is_controlled_reply(data: dict[str, Any]) -> bool:
    return data.get("reason") == "provider_auth"


def controlled_reply(data: dict[str, Any]) -> dict[str, Any]:
    """A provider-auth failure as the completed turn upstream reports: its text, zero usage."""
    zero = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    return {"output": data.get("error", ""), "messages": [], "usage": zero}


def _completed_frames(message_id: str, data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    runtime = data.get("runtime", {})
    return [
        (
            "assistant.completed",
            {
                "message_id": message_id,
                "content": data.get("output", ""),
                "completed": True,
                "partial": False,
                "interrupted": False,
                "runtime": runtime,
            },
        ),
        (
            "run.completed",
            {
                "message_id": message_id,
                "completed": True,
                "messages": data.get("messages", []),
                "usage": data.get("usage", {}),
                "runtime": runtime,
            },
        ),
        ("done", {}),
    ]


def _tool_fields(message_id: str, data: dict[str, Any], *, keep_details: bool) -> dict[str, Any]:
    """Upstream sends preview and args on tool.started only; tool.completed carries nulls."""
    return {
        "message_id": message_id,
        "tool_name": data.get("tool"),
        "preview": data.get("preview") if keep_details else None,
        "args": data.get("args") if keep_details else None,
    }
