"""How the OpenAI dialects end a turn that did not simply succeed, in frames their strict
clients accept (docs/compatibility.md, "Strict clients"): a stopped turn, a reply cut at the
output limit, a worker lost after text went out, a gap, a lost run. Each is a renderer decision,
checked here per event; tests/clients/ drives the real strict client over the same paths."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_queue.api.http.sse import EndStream, Frame, Renderer
from hermes_queue.api.openai.chat_render import ChatStream
from hermes_queue.api.openai.responses_render import ResponseFold, ResponseMeta, stream_renderer
from hermes_queue.events import EventType, RunEvent, lost_event

RUN = "run_" + "b" * 32


def event(kind: EventType, data: dict[str, Any] | None = None, seq: int = 1) -> RunEvent:
    return RunEvent(str(kind), RUN, "s", seq, 1.0, 1, data or {}, f"1-{seq}")


def feed(render: Renderer, *kinds: tuple[EventType, dict[str, Any]]) -> list[Frame]:
    frames: list[Frame] = []
    for seq, (kind, data) in enumerate(kinds, start=1):
        frames += render(event(kind, data, seq))
    return frames


def final_chunk(frames: list[Frame]) -> dict[str, Any]:
    """The chunk before ``[DONE]``, which closes every chat stream."""
    assert frames[-1][1] == "[DONE]"
    payload = frames[-2][1]
    assert isinstance(payload, dict)
    return payload


STARTED = (EventType.RUN_STARTED, {})
DELTA = (EventType.MESSAGE_DELTA, {"delta": "Hel"})


def test_a_stopped_turn_ends_in_the_error_row_with_its_own_code() -> None:
    silent = final_chunk(feed(ChatStream("c", 1, "m"), STARTED, (EventType.RUN_CANCELLED, {})))
    assert silent["choices"][0]["finish_reason"] == "error"
    assert silent["hermes"] == {
        "completed": False,
        "partial": False,
        "failed": True,
        "error": "The turn was stopped",
        "error_code": "cancelled",
    }
    spoke = final_chunk(
        feed(ChatStream("c", 1, "m"), STARTED, DELTA, (EventType.RUN_CANCELLED, {}))
    )
    assert spoke["hermes"]["partial"] is True  # it said something before it was stopped


def test_a_reply_cut_at_the_output_limit_is_the_length_row() -> None:
    completed = {"output": "Hel", "usage": {"output_tokens": 1}, "finish_reason": "length"}
    last = final_chunk(
        feed(ChatStream("c", 1, "m"), STARTED, DELTA, (EventType.RUN_COMPLETED, completed))
    )
    assert last["choices"][0]["finish_reason"] == "length"
    hermes = last["hermes"]
    assert (hermes["completed"], hermes["partial"], hermes["failed"]) == (False, True, False)
    assert hermes["error_code"] == "output_truncated"
    assert last["usage"]["completion_tokens"] == 1


def test_a_plain_success_carries_no_hermes_block() -> None:
    done = (EventType.RUN_COMPLETED, {"output": "Hel", "usage": {}})
    last = final_chunk(feed(ChatStream("c", 1, "m"), STARTED, DELTA, done))
    assert last["choices"][0]["finish_reason"] == "stop" and "hermes" not in last


def test_reasoning_chunks_say_their_role() -> None:
    [(_, chunk, _)] = ChatStream("c", 1, "m")(event(EventType.REASONING, {"text": "hmm"}))
    assert isinstance(chunk, dict)
    assert chunk["choices"][0]["delta"] == {"role": "assistant", "reasoning_content": "hmm"}


def test_a_restart_before_any_text_is_invisible_and_after_text_ends_the_stream() -> None:
    restarted = (EventType.RUN_RESTARTED, {"attempt": 2})
    quiet = ChatStream("c", 1, "m")
    assert feed(quiet, STARTED, restarted) == [feed(ChatStream("c", 1, "m"), STARTED)[0]]
    spoke = ChatStream("c", 1, "m")
    feed(spoke, STARTED, DELTA)
    with pytest.raises(EndStream) as ended:
        spoke(event(*restarted, seq=3))
    last = final_chunk(ended.value.frames)
    assert last["choices"][0]["finish_reason"] == "error"
    assert last["hermes"]["error_code"] == "worker_lost" and last["hermes"]["partial"] is True


@pytest.mark.parametrize(
    ("ending", "code"),
    [
        (event(EventType.STREAM_GAP, {"first_available_id": "2-0"}), "stream_gap"),
        (lost_event(RUN), "run_lost"),
    ],
)
def test_what_chat_has_no_frame_for_ends_the_stream_in_its_error_row(
    ending: RunEvent, code: str
) -> None:
    with pytest.raises(EndStream) as ended:
        ChatStream("c", 1, "m")(ending)
    assert final_chunk(ended.value.frames)["hermes"]["error_code"] == code
    assert all(name is None for name, _, _ in ended.value.frames)  # no named frame


def test_tool_progress_ids_are_visible_ascii() -> None:
    odd = {"tool": "sëarch", "tool_call_id": "call 1\n"}
    [(name, payload, _)] = ChatStream("c", 1, "m")(event(EventType.TOOL_STARTED, odd))
    assert name == "hermes.tool.progress" and isinstance(payload, dict)
    assert payload["toolCallId"] == "call1" and payload["tool"] == "sarch"
    missing = {"tool": "search"}
    [(_, payload, _)] = ChatStream("c", 1, "m")(event(EventType.TOOL_COMPLETED, missing))
    assert isinstance(payload, dict) and payload["toolCallId"] == "call_search"


def responses() -> Renderer:
    return stream_renderer(ResponseMeta(id="resp_x", run_id=RUN, created_at=1, model="m"))


def names(frames: list[Frame]) -> list[str | None]:
    return [name for name, _, _ in frames]


def test_a_response_cut_at_the_output_limit_is_incomplete() -> None:
    completed = {"output": "Hel", "usage": {}, "finish_reason": "length"}
    frames = feed(responses(), STARTED, DELTA, (EventType.RUN_COMPLETED, completed))
    assert names(frames)[-1] == "response.incomplete"
    final = frames[-1][1]
    assert isinstance(final, dict)
    assert final["response"]["status"] == "incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_response_whose_worker_was_lost_after_text_fails_and_ends() -> None:
    render = responses()
    feed(render, STARTED, DELTA)
    with pytest.raises(EndStream) as ended:
        render(event(EventType.RUN_RESTARTED, {"attempt": 2}, seq=3))
    assert names(ended.value.frames)[-1] == "response.failed"
    failed = ended.value.frames[-1][1]
    assert isinstance(failed, dict) and failed["response"]["error"]["code"] == "worker_lost"


def test_a_lost_run_fails_the_response_stream() -> None:
    render = responses()
    feed(render, STARTED)
    with pytest.raises(EndStream) as ended:
        render(lost_event(RUN))
    assert names(ended.value.frames) == ["response.failed"]


def resumed(valid_through: str, seq: int) -> RunEvent:
    data = {"attempt": 2, "valid_through": valid_through}
    return RunEvent(str(EventType.RUN_RESUMED), RUN, "s", seq, 1.0, 2, data, f"1-{seq}")


def test_a_resume_after_the_text_shown_is_invisible_on_chat() -> None:
    """The worker was lost between steps: what the stream showed stands, it just goes on."""
    chat = ChatStream("c", 1, "m")
    feed(chat, STARTED, DELTA)  # the delta is event 1-2
    assert chat(resumed("1-2", 3)) == []
    more = chat(event(EventType.MESSAGE_DELTA, {"delta": "lo"}, 4))
    assert isinstance(more[0][1], dict) and more[0][1]["choices"][0]["delta"] == {"content": "lo"}


def test_a_resume_that_supersedes_shown_text_ends_the_chat_stream() -> None:
    chat = ChatStream("c", 1, "m")
    feed(chat, STARTED, DELTA)
    with pytest.raises(EndStream) as ended:
        chat(resumed("1-1", 3))  # valid through run.started only: the delta is superseded
    assert final_chunk(ended.value.frames)["hermes"]["error_code"] == "worker_lost"


def test_a_stored_response_drops_the_superseded_text_and_a_stream_fails() -> None:
    meta = ResponseMeta(id="resp_x", run_id=RUN, created_at=1, model="m")
    settled = ResponseFold(meta)  # not shown live: the later attempt's text replaces it
    for seq, (kind, data) in enumerate([STARTED, DELTA], start=1):
        settled.feed(event(kind, data, seq))
    assert settled.feed(resumed("1-1", 3)) == [] and settled.reply.text == ""
    settled.feed(event(EventType.MESSAGE_DELTA, {"delta": "Hello"}, 4))
    settled.feed(event(EventType.RUN_COMPLETED, {"output": "Hello", "usage": {}}, 5))
    assert settled.snapshot()["output"][0]["content"][0]["text"] == "Hello"
    live = responses()
    feed(live, STARTED, DELTA)
    with pytest.raises(EndStream) as ended:
        live(resumed("1-1", 3))
    assert names(ended.value.frames)[-1] == "response.failed"
