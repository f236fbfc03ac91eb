"""The renderers over one synthetic run: one frame with an id per stored event (closers aside),
the session stream's numbering, and where each dialect shows the agent's progress notes and the
model's reasoning (upstream-api.md §3)."""

from __future__ import annotations

from typing import Any

from hermes_queue.api.hermes.render import SessionStream, render_runs
from hermes_queue.api.http.sse import Frame, Renderer
from hermes_queue.api.openai.chat_render import ChatStream
from hermes_queue.api.openai.responses_render import ResponseMeta, stream_renderer
from hermes_queue.events import EventType, RunEvent

RUN = "run_" + "a" * 32
USAGE = {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}
TOOL = {"tool": "todo", "tool_call_id": "call_1"}


def run_events() -> list[RunEvent]:
    """A tool turn with reasoning, notes and a subagent, as a worker stores it."""
    steps: list[tuple[EventType, dict[str, Any]]] = [
        (EventType.RUN_STARTED, {"attempt": 1, "user_message": {"role": "user", "content": "x"}}),
        (EventType.MESSAGE_STARTED, {}),
        (EventType.REASONING, {"text": "hmm"}),
        (EventType.MESSAGE_DELTA, {"delta": "You said: x"}),
        (EventType.PROGRESS_NOTE, {"text": "You said: x"}),
        (EventType.TOOL_STARTED, {**TOOL, "preview": "plan", "args": {}, "emoji": "📋"}),
        (EventType.SUBAGENT_START, {"goal": "g"}),
        (EventType.TOOL_COMPLETED, {**TOOL, "duration": 0.1, "error": False, "result": "[]"}),
        (EventType.MESSAGE_DELTA, {"delta": "Done."}),
        (EventType.ASSISTANT_COMPLETED, {"content": "Done.", "runtime": {}, "streamed": True}),
        (EventType.RUN_COMPLETED, {"output": "Done.", "usage": USAGE, "messages": []}),
    ]
    return [
        RunEvent(str(kind), RUN, "s", seq, 1.0 + seq, 1, data, f"1-{seq}")
        for seq, (kind, data) in enumerate(steps, start=1)
    ]


def renderers() -> dict[str, Renderer]:
    meta = ResponseMeta(id="resp_x", run_id=RUN, created_at=1, model="m")
    return {
        "runs": render_runs,
        "session": SessionStream(),
        "chat": ChatStream("chatcmpl-x", 1, "m"),
        "responses": stream_renderer(meta),
    }


def rendered(render: Renderer) -> list[tuple[RunEvent, Frame]]:
    return [(event, frame) for event in run_events() for frame in render(event)]


CLOSERS = ("done", "[DONE]")


def test_every_frame_but_a_closer_has_an_id_of_its_own() -> None:
    for dialect, render in renderers().items():
        frames = [f for _, f in rendered(render) if f[0] not in CLOSERS and f[1] not in CLOSERS]
        ids = [frame_id for _, _, frame_id in frames]
        assert all(ids) and len(set(ids)) == len(ids), dialect
    for dialect in ("runs", "session", "chat"):  # these ids are the stored events' ids
        for event, (name, payload, frame_id) in rendered(renderers()[dialect]):
            if name not in CLOSERS and payload not in CLOSERS:
                assert frame_id == event.id


def test_the_session_stream_numbers_its_frames_and_resumes_with_their_numbers() -> None:
    frames = [frame for _, frame in rendered(SessionStream())]
    names = [name for name, _, _ in frames]
    assert names == [
        "run.started",
        "message.started",
        "assistant.delta",
        "tool.progress",
        "tool.started",
        "tool.completed",
        "assistant.delta",
        "assistant.completed",
        "run.completed",
        "done",
    ]
    assert [payload["seq"] for _, payload, _ in frames] == list(range(1, 11))  # type: ignore[index]
    for cut, (_, _, frame_id) in enumerate(frames[:-1], start=1):
        assert [frame for _, frame in rendered(SessionStream(after=frame_id))] == frames[cut:]


def test_notes_and_reasoning_go_where_upstream_shows_them() -> None:
    """The agent's progress note: ``tool.progress`` (``_thinking``) on the session stream,
    ``reasoning.available`` on the runs stream. The model's reasoning: chat completions'
    ``reasoning_content`` only."""
    shown: dict[str, list[Any]] = {}
    for dialect, render in renderers().items():
        shown[dialect] = [
            frame
            for event, frame in rendered(render)
            if event.type in (EventType.PROGRESS_NOTE, EventType.REASONING)
        ]
    [(name, payload, _)] = shown["session"]
    assert name == "tool.progress" and payload["tool_name"] == "_thinking"  # type: ignore[index]
    assert payload["delta"] == "You said: x"  # type: ignore[index]
    [(_, payload, _)] = shown["runs"]
    assert payload["event"] == "reasoning.available" and payload["text"] == "You said: x"  # type: ignore[index]
    [(_, payload, _)] = shown["chat"]
    # With ``role``: a strict client refuses a chunk with neither role, content nor finish.
    reasoning = {"role": "assistant", "reasoning_content": "hmm"}
    assert payload["choices"][0]["delta"] == reasoning  # type: ignore[index]
    assert shown["responses"] == []


def test_a_reply_that_was_not_streamed_reaches_the_chat_stream_as_content() -> None:
    chat = ChatStream("chatcmpl-x", 1, "m")
    reply = {"content": "⚠️ Provider authentication failed: no key", "streamed": False}
    event = RunEvent(str(EventType.ASSISTANT_COMPLETED), RUN, data=reply, id="1-1")
    [(_, payload, frame_id)] = chat(event)
    assert payload["choices"][0]["delta"] == {"content": reply["content"]}  # type: ignore[index]
    assert frame_id == "1-1"
    streamed = RunEvent(str(EventType.ASSISTANT_COMPLETED), RUN, data={"content": "x"}, id="1-2")
    assert chat(streamed) == []  # its text went out as deltas already


def test_a_resume_is_told_on_the_hermes_dialects() -> None:
    """``run.resumed`` names the last event that stands: clients drop what follows it."""
    data = {"attempt": 2, "valid_through": "1-5", "steps": 3}
    event = RunEvent(str(EventType.RUN_RESUMED), RUN, "s", 9, 9.0, 2, data, "1-9")
    [(_, payload, frame_id)] = render_runs(event)
    assert isinstance(payload, dict) and frame_id == "1-9"
    assert payload["event"] == "run.resumed" and payload["valid_through"] == "1-5"
    [(name, body, _)] = SessionStream()(event)
    assert name == "run.resumed" and isinstance(body, dict) and body["valid_through"] == "1-5"
