"""OpenAI chat-completion dialect: canonical run events as ``chat.completion.chunk`` frames.

Stateless per event (the completion id, creation time and model are fixed per run), so a
resumed stream renders exactly what the first connection would have. Tool progress goes out as
named ``hermes.tool.progress`` frames, as upstream sends them and hermes-webui reads them;
reasoning as ``delta.reasoning_content`` chunks, which OpenAI-style clients understand.
Subagent events are not rendered: upstream forwards them on the runs stream only, and an
OpenAI client has no frame for them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hermes_queue.api.dialects import controlled_reply, is_controlled_reply
from hermes_queue.api.sse import Frame, Renderer
from hermes_queue.events import EventType, RunEvent

TOOL_EMOJI = "⚡"


def completion_id_for(run_id: str) -> str:
    """``chatcmpl-`` + 29 hex, stable per run (upstream's id shape)."""
    return "chatcmpl-" + run_id.removeprefix("run_")[:29]


def usage_of(usage: dict[str, Any] | None) -> dict[str, int]:
    usage = usage or {}
    prompt = int(usage.get("input_tokens", 0))
    completion = int(usage.get("output_tokens", 0))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def hermes_block(
    *, completed: bool, partial: bool, failed: bool, error: str | None
) -> dict[str, Any]:
    block: dict[str, Any] = {"completed": completed, "partial": partial, "failed": failed}
    if error is not None:
        block["error"] = error
        block["error_code"] = "agent_error"
    return block


def chat_renderer(completion_id: str, created: int, model: str) -> Renderer:
    def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> Frame:
        body = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            **extra,
        }
        return (None, body)

    def render(event: RunEvent) -> Iterable[Frame]:
        data = event.data
        match event.type:
            case EventType.RUN_STARTED:
                return [chunk({"role": "assistant"})]
            case EventType.MESSAGE_DELTA:
                return [chunk({"content": data.get("delta", "")})]
            case EventType.REASONING:
                return [chunk({"reasoning_content": data.get("text", "")})]
            case EventType.TOOL_STARTED | EventType.TOOL_COMPLETED:
                return _tool_progress(event)
            case EventType.RUN_COMPLETED:
                usage = usage_of(data.get("usage"))
                return [chunk({}, "stop", usage=usage), (None, "[DONE]")]
            case EventType.RUN_FAILED if is_controlled_reply(data):
                reply = controlled_reply(data)
                return [
                    chunk({"content": reply["output"]}),
                    chunk({}, "stop", usage=usage_of(reply["usage"])),
                    (None, "[DONE]"),
                ]
            case EventType.RUN_FAILED | EventType.RUN_CANCELLED:
                failed = event.type == EventType.RUN_FAILED
                error = str(data.get("error") or ("stopped" if not failed else "agent error"))
                extra: dict[str, Any] = {
                    "hermes": hermes_block(
                        completed=False, partial=True, failed=failed, error=error
                    )
                }
                if failed:
                    extra["error"] = {"message": error, "type": "agent_error"}
                return [chunk({}, "error" if failed else "stop", **extra), (None, "[DONE]")]
            case EventType.RUN_RESTARTED | EventType.STREAM_GAP:
                return [(f"hermes.{event.type}", dict(data))]
            case _:
                return ()

    return render


def _tool_progress(event: RunEvent) -> list[Frame]:
    tool = str(event.data.get("tool") or "")
    if not tool or tool.startswith("_"):
        return []  # internal tools are never shown, as upstream
    payload: dict[str, Any] = {"tool": tool, "toolCallId": event.data.get("tool_call_id")}
    if event.type == EventType.TOOL_STARTED:
        payload.update(emoji=TOOL_EMOJI, label=event.data.get("preview") or tool, status="running")
    else:
        payload["status"] = "completed"
    return [("hermes.tool.progress", payload)]
