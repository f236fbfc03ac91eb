"""OpenAI Responses dialect: canonical run events as ``response.*`` stream events and objects.

Responses events carry a ``sequence_number`` and items an ``output_index``, both positions in
the whole stream, so unlike the chat renderer this one needs state across events. It keeps it
deterministic instead of shared: a :class:`ResponseFold` is a pure fold over the run's
canonical events *from the first one*, and every stream (first connection, or a resume with
``starting_after=N`` on any replica) replays the run from its start through a fresh fold and
drops the frames numbered ``<= N``. The same events always give the same numbers, ids and
objects, so nothing about a response stream is kept in any process. The non-stream object,
the stored object and the ``response.completed`` envelope come from the same fold, so they
cannot disagree. Events the Responses API has no item for (reasoning, approvals, subagents)
are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hermes_queue.api.http.sse import KEEPALIVE_LINE, EndStream, Frame, Renderer
from hermes_queue.api.openai.chat_render import (
    RUN_LOST,
    RUN_LOST_MESSAGE,
    SERVER_DRAINING,
    SERVER_DRAINING_MESSAGE,
    STREAM_GAP,
    STREAM_GAP_MESSAGE,
    WORKER_LOST,
    WORKER_LOST_MESSAGE,
)
from hermes_queue.events import EventType, RunEvent
from hermes_queue.replies import ReplyText, controlled_reply, is_controlled_reply, truncated
from hermes_queue.runs.turn_request import ResponseSettings, TurnRequest

# A response in one of these statuses is final (unlike a run's, "incomplete" is one of them).
FINAL_RESPONSE_STATUSES = frozenset({"completed", "failed", "incomplete"})


def response_id_for(run_id: str) -> str:
    """``resp_`` + 28 hex (upstream's shape), derived from the run so every replica agrees."""
    return "resp_" + run_id.removeprefix("run_")[:28]


def output_message_id(run_id: str) -> str:
    """The id of a response's assistant message item, derived from the run like the response
    id: ``msg_`` + 24 hex, shorter than the reply id the other dialects use
    (``events.message_id_for``), so the two must not be mixed up."""
    return "msg_" + run_id.removeprefix("run_")[:24]


def response_usage(usage: dict[str, Any] | None) -> dict[str, int]:
    usage = usage or {}
    prompt, completion = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
    return {
        "input_tokens": prompt,
        "output_tokens": completion,
        "total_tokens": prompt + completion,
    }


@dataclass(frozen=True)
class ResponseMeta:
    """What a response object says besides its output; fixed when the run is created and kept
    in the run's turn request (its ``response`` and ``instructions``), so any replica can
    rebuild it."""

    id: str
    run_id: str
    created_at: int
    model: str
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: str | None = None
    store: bool = True
    background: bool = False
    # Whether the client asked for a stream: the stored object is then the stream's.
    stream: bool = False

    @classmethod
    def from_request(cls, run_id: str, turn: TurnRequest) -> ResponseMeta:
        settings = turn.response or ResponseSettings(created_at=0, model="")
        return cls(
            id=response_id_for(run_id),
            run_id=run_id,
            created_at=settings.created_at,
            model=settings.model,
            instructions=turn.instructions,
            previous_response_id=settings.previous_response_id,
            conversation=settings.conversation,
            store=settings.store,
            background=settings.background,
            stream=settings.stream,
        )

    def envelope(
        self,
        status: str,
        output: list[dict[str, Any]] | None = None,
        usage: dict[str, int] | None = None,
        error: dict[str, Any] | None = None,
        incomplete: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "response",
            "status": status,
            "created_at": self.created_at,
            "model": self.model,
            "output": output or [],
            "usage": usage,
            "error": error,
            "incomplete_details": incomplete,
            "instructions": self.instructions,
            "previous_response_id": self.previous_response_id,
            "store": self.store,
            "background": self.background,
        }


def _arguments(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args if args is not None else {})


@dataclass
class ResponseFold:
    """The response as far as the events fed so far describe it, plus the frames each adds.

    ``streamed``: the object as a stream shows it (upstream's stream and non-stream answers
    differ): its final text is all the text streamed (else the last reply, the run's output),
    and a tool's output is a part list (else its text)."""

    meta: ResponseMeta
    streamed: bool = True
    # Whether a client is shown the frames as they are made (a stream): then text a later
    # attempt supersedes cannot be taken back and fails the response; else it is dropped.
    live: bool = False
    status: str = "queued"
    sequence: int = 0
    items: dict[int, dict[str, Any]] = field(default_factory=dict)
    message_index: int | None = None
    # The reply's text as far as the events tell it (what a later attempt supersedes is judged
    # by the event ids it keeps).
    reply: ReplyText = field(default_factory=ReplyText)
    tool_index: dict[str, int] = field(default_factory=dict)
    usage: dict[str, int] | None = None
    error: dict[str, Any] | None = None
    incomplete: dict[str, Any] | None = None
    # This turn's transcript messages (assistant/tool), from run.completed.
    messages: list[dict[str, Any]] = field(default_factory=list)

    def _frame(self, name: str, **payload: Any) -> Frame:
        """The next frame; its ``id:`` is its ``sequence_number``, the Responses cursor."""
        number = self.sequence
        self.sequence += 1
        return (name, {"type": name, "sequence_number": number, **payload}, str(number))

    def output(self) -> list[dict[str, Any]]:
        return [self.items[index] for index in sorted(self.items)]

    def snapshot(self) -> dict[str, Any]:
        return self.meta.envelope(
            self.status, self.output(), self.usage, self.error, self.incomplete
        )

    @property
    def final(self) -> bool:
        return self.status in FINAL_RESPONSE_STATUSES

    def feed(self, event: RunEvent) -> list[Frame]:
        """The frames ``event`` adds. Once the response is final nothing more is added: a run
        the dialect could not follow (see :meth:`_unfollowable`) may go on without it."""
        if self.final:
            return []
        unfollowable = self._unfollowable(event)
        if unfollowable is not None:
            return self._fail(*unfollowable)
        data = event.data
        frames: list[Frame] = []
        if self.status == "queued":
            self.status = "in_progress"
            frames.append(self._frame("response.created", response=self.snapshot()))
        match event.type:
            case EventType.MESSAGE_DELTA:
                frames += self._delta(event)
            case EventType.TOOL_STARTED:
                frames += self._tool_started(data)
            case EventType.TOOL_COMPLETED:
                frames += self._tool_completed(data)
            case EventType.RUN_COMPLETED:
                frames += self._completed(data)
            case EventType.RUN_FAILED if is_controlled_reply(data):
                frames += self._completed(controlled_reply(data))  # upstream: a normal reply
            case EventType.RUN_FAILED:
                code = WORKER_LOST if data.get("reason") == WORKER_LOST else None
                frames += self._fail(str(data.get("error") or "agent error"), code)
            case EventType.RUN_CANCELLED:
                frames += self._close_message("incomplete")
                self.status = "incomplete"
                frames.append(self._frame("response.incomplete", response=self.snapshot()))
        return frames

    def _unfollowable(self, event: RunEvent) -> tuple[str, str] | None:
        """What the Responses dialect has no frame for, as the failure that ends the response
        (message, code): a lost run, a gap, or a worker lost after this response showed text
        that the next attempt would say again in its own words."""
        match event.type:
            case EventType.RUN_RESTARTED | EventType.RUN_RESUMED:
                if not self.reply.superseded_by(event):
                    return None
                if self.live:
                    return WORKER_LOST_MESSAGE, WORKER_LOST
                # Not shown yet: the later attempt's text replaces the interrupted step's.
                self.reply.add(event)
            case EventType.STREAM_GAP:
                return STREAM_GAP_MESSAGE, STREAM_GAP
            case EventType.STREAM_LOST:
                return RUN_LOST_MESSAGE, RUN_LOST
            case EventType.STREAM_DRAINED:
                return SERVER_DRAINING_MESSAGE.format(run_id=event.run_id), SERVER_DRAINING
        return None

    def _fail(self, error: str, code: str | None = None) -> list[Frame]:
        frames = self._close_message("incomplete")
        self.status = "failed"
        self.error = {"message": error, "type": "server_error"}
        if code is not None:
            self.error["code"] = code
        frames.append(self._frame("response.failed", response=self.snapshot()))
        return frames

    def _open_message(self) -> list[Frame]:
        if self.message_index is not None:
            return []
        self.message_index = len(self.items)
        item = {
            "id": output_message_id(self.meta.run_id),
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        self.items[self.message_index] = item
        return [
            self._frame("response.output_item.added", output_index=self.message_index, item=item)
        ]

    def _delta(self, event: RunEvent) -> list[Frame]:
        delta = str(event.data.get("delta", ""))
        if not delta:
            return []
        frames = self._open_message()
        self.reply.add(event)
        frames.append(
            self._frame(
                "response.output_text.delta",
                item_id=output_message_id(self.meta.run_id),
                output_index=self.message_index,
                content_index=0,
                delta=delta,
                logprobs=[],
            )
        )
        return frames

    def _tool_started(self, data: dict[str, Any]) -> list[Frame]:
        name, call_id = str(data.get("tool") or ""), str(data.get("tool_call_id") or "")
        if not name or name.startswith("_") or call_id in self.tool_index:
            return []  # internal tools are never shown, as upstream
        index = self.tool_index[call_id] = len(self.items)
        item = {
            "id": f"fc_{call_id}",
            "type": "function_call",
            "status": "in_progress",
            "name": name,
            "call_id": call_id,
            "arguments": _arguments(data.get("args")),
        }
        self.items[index] = item
        return [self._frame("response.output_item.added", output_index=index, item=item)]

    def _tool_completed(self, data: dict[str, Any]) -> list[Frame]:
        call_id = str(data.get("tool_call_id") or "")
        index = self.tool_index.get(call_id)
        if index is None or self.items[index]["status"] == "completed":
            return []  # an orphan completion (or an internal tool) is skipped, as upstream
        call = self.items[index] = {**self.items[index], "status": "completed"}
        frames = [self._frame("response.output_item.done", output_index=index, item=call)]
        out_index = len(self.items)
        result = "" if data.get("result") is None else str(data.get("result"))
        item = {
            "id": f"fco_{call_id}",
            "type": "function_call_output",
            "call_id": call_id,
            "output": [{"type": "input_text", "text": result}] if self.streamed else result,
            "status": "completed",
        }
        self.items[out_index] = item
        frames.append(self._frame("response.output_item.added", output_index=out_index, item=item))
        frames.append(self._frame("response.output_item.done", output_index=out_index, item=item))
        return frames

    def _close_message(self, status: str, text: str | None = None) -> list[Frame]:
        if self.message_index is None:
            return []
        full = self.reply.text if text is None else text
        item_id = output_message_id(self.meta.run_id)
        item = {
            **self.items[self.message_index],
            "status": status,
            "content": [{"type": "output_text", "text": full, "annotations": []}],
        }
        self.items[self.message_index] = item
        return [
            self._frame(
                "response.output_text.done",
                item_id=item_id,
                output_index=self.message_index,
                content_index=0,
                text=full,
                logprobs=[],
            ),
            self._frame("response.output_item.done", output_index=self.message_index, item=item),
        ]

    def _completed(self, data: dict[str, Any]) -> list[Frame]:
        frames = self._open_message()  # a reply without deltas still ends in a message item
        output = str(data.get("output", ""))
        text = (self.reply.text or output) if self.streamed else output
        self.usage = response_usage(data.get("usage"))
        self.messages = [m for m in data.get("messages") or [] if isinstance(m, dict)]
        if truncated(data):  # cut at the output limit: OpenAI's incomplete response
            frames += self._close_message("incomplete", text)
            self.status, self.incomplete = "incomplete", {"reason": "max_output_tokens"}
            frames.append(self._frame("response.incomplete", response=self.snapshot()))
            return frames
        frames += self._close_message("completed", text)
        self.status = "completed"
        frames.append(self._frame("response.completed", response=self.snapshot()))
        return frames


def stream_renderer(meta: ResponseMeta, starting_after: int = -1) -> Renderer:
    """A renderer for one connection; it must be fed the run from its first event."""
    fold = ResponseFold(meta, live=True)

    def render(event: RunEvent) -> Iterable[Frame]:
        frames = [f for f in fold.feed(event) if int(f[2]) > starting_after]
        if fold.final and not event.terminal:  # ended before the run: nothing may follow
            raise EndStream(frames)
        return frames

    render.keepalive = KEEPALIVE_LINE  # type: ignore[attr-defined]  # the SDK's (http/sse.py)
    return render
