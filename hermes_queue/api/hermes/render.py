"""Renderers: canonical events in, the frames of one endpoint's dialect out.

Each stored event becomes at most one frame (besides a stream's closing ``done``), carrying the
event's id, so a resumed stream renders exactly what the first connection would have from the
same point, on any replica. The runs dialect is a pure function of one event. The session
stream numbers its frames (``seq`` 1, 2, 3 … as upstream), skipping the events it does not
show, so it is a fold over the run from its first event: every connection, a resume too, reads
the run from the start and sends only what follows the client's cursor.
"""

from __future__ import annotations

from typing import Any

from hermes_queue.api.http.sse import Frame, shared
from hermes_queue.events import (
    SUBAGENT_FIELDS,
    EventType,
    RunEvent,
    message_id_for,
    parse_stream_id,
)
from hermes_queue.replies import controlled_reply, is_controlled_reply, truncated


@shared
def render_runs(event: RunEvent) -> list[Frame]:
    """Upstream ``/v1/runs/{id}/events`` (upstream-api.md §3.3): unnamed frames with ``event``.

    ``reasoning.available`` is the agent's progress note, as upstream's; the model's streamed
    reasoning is not shown. ``run.steered`` and ``run.completed``'s ``pending_steer`` are VN's.
    ``run.restarted``, ``run.resumed`` and ``stream.gap`` are
    additions: a retried attempt tells clients to drop the partial output they have (all of it,
    or what follows ``valid_through``), and a trimmed stream is never skipped silently.
    """
    data = event.data
    fields: dict[str, Any]
    name = str(event.type)
    match event.type:
        case EventType.MESSAGE_DELTA:
            fields = {"delta": data.get("delta", "")}
        case EventType.PROGRESS_NOTE:
            name, fields = "reasoning.available", {"text": data.get("text", "")}
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
            fields = {key: data[key] for key in SUBAGENT_FIELDS if key in data}
        case EventType.RUN_STEERED:
            fields = {"accepted": True}
        case EventType.RUN_COMPLETED:
            fields = {"output": data.get("output", ""), "usage": data.get("usage", {})}
            if data.get("pending_steer"):
                fields["pending_steer"] = data["pending_steer"]
        case EventType.RUN_FAILED:
            fields = {"error": data.get("error", "run failed")}
            if data.get("reason"):
                fields["reason"] = data["reason"]
        case EventType.RUN_CANCELLED:
            fields = {}
        case EventType.RUN_RESTARTED:
            fields = {"attempt": data.get("attempt", event.attempt)}
        case EventType.RUN_RESUMED:
            fields = {
                "attempt": data.get("attempt", event.attempt),
                "valid_through": data.get("valid_through"),
            }
        case EventType.STREAM_GAP:
            fields = dict(data)
        case _:
            return []
    payload = {"event": name, "run_id": event.run_id, "timestamp": event.ts, **fields}
    return [(None, payload, event.id)]


# A session-stream frame before the common fields: (name, payload, is the closing ``done``).
_SessionFrame = tuple[str, dict[str, Any], bool]
DONE: _SessionFrame = ("done", {}, True)


class SessionStream:
    """Upstream's session chat stream (upstream-api.md §3.1) for one connection: named frames, each
    payload carrying ``session_id``, ``run_id``, ``seq`` and ``ts``; a terminal event closes
    with ``done``. Feed it the run from its first event; with ``after`` (a resume cursor) only
    the frames after the one that carried that id are returned, numbered as the first
    connection numbered them.

    Not shown: the model's streamed reasoning (upstream shows only the agent's progress notes,
    as ``tool.progress``) and subagent events (upstream forwards them on the runs stream). A
    steer is shown (``run.steered``, with its text), so a chat that steered a turn sees it."""

    def __init__(self, after: str | None = None) -> None:
        self._after = parse_stream_id(after) if after else None
        self._seq = 0

    def __call__(self, event: RunEvent) -> list[Frame]:
        common = {"session_id": event.session_id, "run_id": event.run_id, "ts": event.ts}
        frames: list[Frame] = []
        for name, payload, closer in session_frames(event):
            self._seq += 1
            if self._shown(event, closer):
                body = {**payload, **common, "seq": self._seq}
                frames.append((name, body, "" if closer else event.id))
        return frames

    def _shown(self, event: RunEvent, closer: bool) -> bool:
        """Whether the client has not seen this frame: it follows the cursor (a closer follows
        the frame that carried its event's id); a gap only if the client missed entries."""
        if self._after is None:
            return True
        if event.type == EventType.STREAM_GAP:
            first = parse_stream_id(str(event.data.get("first_available_id") or ""))
            return first is not None and first > self._after
        position = parse_stream_id(event.id)
        if position is None:
            return True
        return position > self._after or (closer and position == self._after)


def session_frames(event: RunEvent) -> list[_SessionFrame]:
    """The session stream's frames of one event, before numbering."""
    data, message_id = event.data, message_id_for(event.run_id)
    match event.type:
        case EventType.RUN_STARTED:
            payload = {"user_message": data.get("user_message"), "runtime": data.get("runtime", {})}
            return [("run.started", payload, False)]
        case EventType.MESSAGE_STARTED:
            message = {"id": message_id, "role": "assistant"}
            return [("message.started", {"message": message}, False)]
        case EventType.MESSAGE_DELTA:
            return [
                ("assistant.delta", {"message_id": message_id, "delta": data.get("delta")}, False)
            ]
        case EventType.PROGRESS_NOTE:
            note = {"message_id": message_id, "tool_name": "_thinking", "delta": data.get("text")}
            return [("tool.progress", note, False)]
        case EventType.TOOL_STARTED:
            return [("tool.started", _tool_fields(message_id, data, keep_details=True), False)]
        case EventType.TOOL_COMPLETED:
            name = "tool.failed" if data.get("error") else "tool.completed"
            return [(name, _tool_fields(message_id, data, keep_details=False), False)]
        case EventType.APPROVAL_REQUEST | EventType.APPROVAL_RESPONDED:
            return [(str(event.type), {"message_id": message_id, **data}, False)]
        case EventType.RUN_STEERED:
            steer = {
                "message_id": message_id,
                "steer_id": data.get("steer_id"),
                "text": data.get("text"),
                "accepted": True,
            }
            return [("run.steered", steer, False)]
        case EventType.ASSISTANT_COMPLETED:
            return [("assistant.completed", _assistant_completed(message_id, data), False)]
        case EventType.RUN_COMPLETED:
            return [("run.completed", _run_completed(message_id, data), False), DONE]
        case EventType.RUN_FAILED if is_controlled_reply(data):
            # Upstream answers a provider-auth failure as an ordinary reply (upstream-api.md §6.4);
            # its assistant.completed was stored just before.
            completed = _run_completed(message_id, controlled_reply(data))
            return [("run.completed", completed, False), DONE]
        case EventType.RUN_FAILED:
            return [("error", {"message": data.get("error", "run failed")}, False), DONE]
        case EventType.RUN_CANCELLED:
            return [("run.cancelled", {"message_id": message_id}, False), DONE]
        case EventType.RUN_RESTARTED | EventType.RUN_RESUMED | EventType.STREAM_GAP:
            return [(str(event.type), dict(data), False)]
        case _:
            return []


def _assistant_completed(message_id: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "message_id": message_id,
        "content": data.get("content", ""),
        "completed": not truncated(data),
        "partial": truncated(data),
        "interrupted": False,
        "runtime": data.get("runtime") or {},
    }


def _run_completed(message_id: str, data: dict[str, Any]) -> dict[str, Any]:
    completed = {
        "message_id": message_id,
        "completed": not truncated(data),
        "messages": data.get("messages", []),
        "usage": data.get("usage", {}),
        "runtime": data.get("runtime") or {},
    }
    if data.get("pending_steer"):
        completed["pending_steer"] = data["pending_steer"]  # VN
    return completed


def _tool_fields(message_id: str, data: dict[str, Any], *, keep_details: bool) -> dict[str, Any]:
    """Upstream sends preview and args on tool.started only; tool.completed carries nulls."""
    return {
        "message_id": message_id,
        "tool_name": data.get("tool"),
        "preview": data.get("preview") if keep_details else None,
        "args": data.get("args") if keep_details else None,
    }
