"""Renderers: one canonical event in, the frames of one endpoint's dialect out.

Each function is pure and stateless, so a resumed stream renders exactly what the first
connection would have, on any replica.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hermes_queue.api.sse import Frame
from hermes_queue.events import EventType, RunEvent


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
