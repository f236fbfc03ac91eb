"""OpenAI chat-completion dialect: canonical run events as ``chat.completion.chunk`` frames.

The completion id, creation time and model are fixed per run. Tool progress goes out as
named ``hermes.tool.progress`` frames, as upstream sends them and hermes-webui reads them;
reasoning as ``delta.reasoning_content`` chunks, which OpenAI-style clients understand.
Subagent events are not rendered: upstream forwards them on the runs stream only, and an
OpenAI client has no frame for them.
"""

from __future__ import annotations

from typing import Any

from hermes_queue.api.dialects import controlled_reply, is_controlled_reply
from hermes_queue.api.sse import Frame
from hermes_queue.events import EventType, RunEvent

# The emoji of a tool whose backend named none (Hermes names each tool's own).
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


class ChatStream:
    """The ``chat.completion.chunk`` stream of one completion (upstream-api.md §3.2): the role
    chunk, content and reasoning chunks, named ``hermes.tool.progress`` frames, then the final
    chunk (its own frame, with ``finish_reason`` and ``usage``) and the ``[DONE]`` closer.

    Per connection: it remembers whether any reply text went out, which a failure's ``hermes``
    block reports as ``partial``. The agent's progress notes are not shown (upstream's chat
    stream has no frame for them)."""

    def __init__(self, completion_id: str, created: int, model: str) -> None:
        self.completion_id, self.created, self.model = completion_id, created, model
        self.streamed = False

    def chunk(
        self, event: RunEvent, delta: dict[str, Any], finish: str | None = None, **extra: Any
    ) -> Frame:
        body = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return (None, body, event.id)

    def __call__(self, event: RunEvent) -> list[Frame]:
        data = event.data
        match event.type:
            case EventType.RUN_STARTED:
                return [self.chunk(event, {"role": "assistant"})]
            case EventType.MESSAGE_DELTA:
                self.streamed = True
                return [self.chunk(event, {"content": data.get("delta", "")})]
            case EventType.REASONING:
                return [self.chunk(event, {"reasoning_content": data.get("text", "")})]
            case EventType.ASSISTANT_COMPLETED if not data.get("streamed", True):
                # A reply that was not streamed (the controlled provider-auth reply, a backend
                # that answers at once) still reaches the client as content.
                self.streamed = True
                return [self.chunk(event, {"content": str(data.get("content", ""))})]
            case EventType.TOOL_STARTED | EventType.TOOL_COMPLETED:
                return _tool_progress(event)
            case EventType.RUN_COMPLETED:
                final = self.chunk(event, {}, "stop", usage=usage_of(data.get("usage")))
                return [final, DONE]
            case EventType.RUN_FAILED if is_controlled_reply(data):
                usage = usage_of(controlled_reply(data)["usage"])
                return [self.chunk(event, {}, "stop", usage=usage), DONE]
            case EventType.RUN_FAILED | EventType.RUN_CANCELLED:
                return [self._unfinished(event), DONE]
            case EventType.RUN_RESTARTED | EventType.STREAM_GAP:
                if event.type == EventType.RUN_RESTARTED:
                    self.streamed = False  # the client drops what the lost attempt said
                return [(f"hermes.{event.type}", dict(data), event.id)]
            case _:
                return []

    def _unfinished(self, event: RunEvent) -> Frame:
        """The final chunk of a failed (``finish_reason: "error"``, with ``error``) or stopped
        (``"stop"``) turn: its ``hermes`` block and usage, as upstream's."""
        failed = event.type == EventType.RUN_FAILED
        error = str(event.data.get("error") or ("agent error" if failed else "stopped"))
        extra: dict[str, Any] = {"usage": usage_of(event.data.get("usage"))}
        if failed:
            extra["error"] = {"message": error, "type": "agent_error"}
        extra["hermes"] = hermes_block(
            completed=False, partial=self.streamed, failed=failed, error=error
        )
        return self.chunk(event, {}, "error" if failed else "stop", **extra)


DONE: Frame = (None, "[DONE]", "")


def _tool_progress(event: RunEvent) -> list[Frame]:
    tool = str(event.data.get("tool") or "")
    if not tool or tool.startswith("_"):
        return []  # internal tools are never shown, as upstream
    payload: dict[str, Any] = {"tool": tool, "toolCallId": event.data.get("tool_call_id")}
    if event.type == EventType.TOOL_STARTED:
        payload.update(
            emoji=event.data.get("emoji") or TOOL_EMOJI,
            label=event.data.get("preview") or tool,
            status="running",
        )
    else:
        payload["status"] = "completed"
    return [("hermes.tool.progress", payload, event.id)]
