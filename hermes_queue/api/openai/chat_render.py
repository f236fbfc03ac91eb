"""OpenAI chat-completion dialect: canonical run events as ``chat.completion.chunk`` frames.

The completion id, creation time and model are fixed per run. Tool progress goes out as
named ``hermes.tool.progress`` frames, as upstream sends them and hermes-webui reads them;
reasoning as ``delta.reasoning_content`` chunks, which OpenAI-style clients understand.
Subagent events are not rendered: upstream forwards them on the runs stream only, and an
OpenAI client has no frame for them.
"""

from __future__ import annotations

from typing import Any

from hermes_queue.api.http.sse import KEEPALIVE_LINE, EndStream, Frame
from hermes_queue.events import EventType, RunEvent
from hermes_queue.replies import ReplyText, controlled_reply, is_controlled_reply, truncated

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
    *,
    completed: bool,
    partial: bool,
    failed: bool,
    error: str | None,
    error_code: str = "agent_error",
) -> dict[str, Any]:
    block: dict[str, Any] = {"completed": completed, "partial": partial, "failed": failed}
    if error is not None:
        block["error"] = error
        block["error_code"] = error_code
    return block


# The ``error_code`` of a turn that did not end as a success, beyond upstream's
# ``agent_error`` and ``output_truncated``: strict clients read any other code as "unknown",
# others can tell what happened.
CANCELLED = "cancelled"
WORKER_LOST = "worker_lost"
STREAM_GAP = "stream_gap"
RUN_LOST = "run_lost"
OUTPUT_TRUNCATED = "output_truncated"
TRUNCATED_MESSAGE = "The reply was cut off at the model's output limit"
WORKER_LOST_MESSAGE = "The worker running this turn was lost after part of the reply"
STREAM_GAP_MESSAGE = "Events of this turn were lost; the stream cannot show the rest"
RUN_LOST_MESSAGE = "This run no longer exists in Redis: no event can follow"
SERVER_DRAINING = "server_draining"
SERVER_DRAINING_MESSAGE = (
    "This API replica shut down before the turn ended; the turn goes on: its reply is on "
    "/v1/runs/{run_id}/events and in the session transcript, from any replica"
)


def visible_ascii(raw: Any, fallback: str) -> str:
    """``raw`` as a field strict clients accept (1–256 visible ASCII characters): characters
    outside ``!``..``~`` dropped, cut at 256, ``fallback`` when nothing is left."""
    text = "".join(ch for ch in str(raw or "") if "!" <= ch <= "~")[:256]
    return text or fallback


class ChatStream:
    """The ``chat.completion.chunk`` stream of one completion (upstream-api.md §3.2): the role
    chunk, content and reasoning chunks, named ``hermes.tool.progress`` frames, then the final
    chunk (its own frame, with ``finish_reason`` and ``usage``) and the ``[DONE]`` closer.

    Only frames the dialect defines go out (docs/compatibility.md, strict clients): every chunk
    says ``role``, ``content`` or ``finish_reason`` (a reasoning chunk carries ``role``
    beside its ``reasoning_content``), and the end of a turn is one of upstream's final rows:
    ``stop`` (success, no ``hermes`` block), ``length`` (``output_truncated``) or ``error``
    with ``hermes.failed``. A stopped turn is such an error row (``error_code`` ``cancelled``);
    what the dialect has no frame for ends the stream the same way: a lost run, a gap, or a
    worker lost after this stream showed text the next attempt may not say again.

    Per connection: it remembers whether any reply text went out, which a failure's ``hermes``
    block reports as ``partial``. The agent's progress notes are not shown (upstream's chat
    stream has no frame for them)."""

    keepalive = KEEPALIVE_LINE  # the openai SDK's decoder needs it (http/sse.py)

    def __init__(self, completion_id: str, created: int, model: str) -> None:
        self.completion_id, self.created, self.model = completion_id, created, model
        self.streamed = False
        self.shown = ReplyText()  # the reply's text this stream showed

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
                self.shown.add(event)
                return [self.chunk(event, {"content": data.get("delta", "")})]
            case EventType.REASONING:
                reasoning = {"role": "assistant", "reasoning_content": data.get("text", "")}
                return [self.chunk(event, reasoning)]
            case EventType.ASSISTANT_COMPLETED if not data.get("streamed", True):
                # A reply that was not streamed (the controlled provider-auth reply, a backend
                # that answers at once) still reaches the client as content.
                self.streamed = True
                self.shown.add_text(event.id, str(data.get("content", "")))
                return [self.chunk(event, {"content": str(data.get("content", ""))})]
            case EventType.TOOL_STARTED | EventType.TOOL_COMPLETED:
                return _tool_progress(event)
            case EventType.RUN_COMPLETED if truncated(data):
                block = hermes_block(
                    completed=False,
                    partial=True,
                    failed=False,
                    error=str(data.get("error") or TRUNCATED_MESSAGE),
                    error_code=OUTPUT_TRUNCATED,
                )
                usage = usage_of(data.get("usage"))
                return [self.chunk(event, {}, "length", usage=usage, hermes=block), DONE]
            case EventType.RUN_COMPLETED:
                final = self.chunk(event, {}, "stop", usage=usage_of(data.get("usage")))
                return [final, DONE]
            case EventType.RUN_FAILED if is_controlled_reply(data):
                usage = usage_of(controlled_reply(data)["usage"])
                return [self.chunk(event, {}, "stop", usage=usage), DONE]
            case EventType.RUN_FAILED:
                error = str(data.get("error") or "agent error")
                code = WORKER_LOST if data.get("reason") == WORKER_LOST else "agent_error"
                return [self._error_row(event, error, code), DONE]
            case EventType.RUN_CANCELLED:
                return [self._error_row(event, "The turn was stopped", CANCELLED), DONE]
            case EventType.RUN_RESTARTED | EventType.RUN_RESUMED if self.shown.superseded_by(event):
                # Text this stream showed is superseded by a later attempt: chat has no frame
                # to take text back, so this stream ends (docs/compatibility.md §2.5). A resume
                # after text that stands is invisible: the stream goes on.
                raise EndStream([self._error_row(event, WORKER_LOST_MESSAGE, WORKER_LOST), DONE])
            case EventType.STREAM_GAP:
                raise EndStream([self._error_row(event, STREAM_GAP_MESSAGE, STREAM_GAP), DONE])
            case EventType.STREAM_LOST:
                raise EndStream([self._error_row(event, RUN_LOST_MESSAGE, RUN_LOST), DONE])
            case EventType.STREAM_DRAINED:
                message = SERVER_DRAINING_MESSAGE.format(run_id=event.run_id)
                raise EndStream([self._error_row(event, message, SERVER_DRAINING), DONE])
            case _:
                return []

    def _error_row(self, event: RunEvent, error: str, code: str) -> Frame:
        """The final chunk of a turn that did not succeed (``finish_reason: "error"``): its
        ``error``, ``hermes`` block and usage, as upstream's."""
        extra: dict[str, Any] = {
            "usage": usage_of(event.data.get("usage")),
            "error": {"message": error, "type": "agent_error" if code == "agent_error" else code},
            "hermes": hermes_block(
                completed=False, partial=self.streamed, failed=True, error=error, error_code=code
            ),
        }
        return self.chunk(event, {}, "error", **extra)


DONE: Frame = (None, "[DONE]", "")


def _tool_progress(event: RunEvent) -> list[Frame]:
    tool = str(event.data.get("tool") or "")
    if not tool or tool.startswith("_"):
        return []  # internal tools are never shown, as upstream
    call_id = visible_ascii(event.data.get("tool_call_id"), f"call_{visible_ascii(tool, 'tool')}")
    payload: dict[str, Any] = {"tool": visible_ascii(tool, "tool"), "toolCallId": call_id}
    if event.type == EventType.TOOL_STARTED:
        payload.update(
            emoji=event.data.get("emoji") or TOOL_EMOJI,
            label=event.data.get("preview") or tool,
            status="running",
        )
    else:
        payload["status"] = "completed"
    return [("hermes.tool.progress", payload, event.id)]
