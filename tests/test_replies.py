"""The one fold of a run's events into its reply (replies.ReplyText), which the feed's final
answers, the OpenAI renderers and a resuming worker all read."""

from __future__ import annotations

from typing import Any

from hermes_queue.events import EventType, RunEvent
from hermes_queue.replies import ReplyText


def event(kind: str, entry_id: str, **data: Any) -> RunEvent:
    return RunEvent(type=kind, run_id="run_x", id=entry_id, data=data)


def folded(*events: RunEvent) -> ReplyText:
    reply = ReplyText()
    for each in events:
        reply.add(each)
    return reply


def test_deltas_make_the_text_and_the_completed_reply_is_what_was_shown() -> None:
    reply = folded(
        event(EventType.MESSAGE_DELTA, "1-0", delta="Hello "),
        event(EventType.TOOL_STARTED, "2-0", tool="search"),
        event(EventType.MESSAGE_DELTA, "3-0", delta="world"),
        event(EventType.ASSISTANT_COMPLETED, "4-0", content="Hello world!"),
    )
    assert (reply.text, reply.shown) == ("Hello world", "Hello world!")


def test_a_restart_takes_back_everything_said_before_it() -> None:
    restart = event(EventType.RUN_RESTARTED, "3-0", attempt=2)
    reply = folded(event(EventType.MESSAGE_DELTA, "1-0", delta="first try"))
    assert reply.superseded_by(restart)
    reply.add(restart)
    reply.add(event(EventType.MESSAGE_DELTA, "4-0", delta="second try"))
    assert reply.text == "second try"


def test_a_resume_takes_back_only_what_followed_its_last_valid_event() -> None:
    resume = event(EventType.RUN_RESUMED, "5-0", attempt=2, valid_through="2-0")
    reply = folded(
        event(EventType.MESSAGE_DELTA, "1-0", delta="stands "),
        event(EventType.MESSAGE_DELTA, "2-0", delta="stands too "),
        event(EventType.MESSAGE_DELTA, "3-0", delta="interrupted"),
    )
    assert reply.superseded_by(resume)
    reply.add(resume)
    assert reply.text == "stands stands too "
    assert not reply.superseded_by(resume)  # nothing after valid_through is left


def test_a_resume_after_text_that_stands_takes_nothing_back() -> None:
    reply = folded(event(EventType.MESSAGE_DELTA, "1-0", delta="all of it"))
    assert not reply.superseded_by(event(EventType.RUN_RESUMED, "2-0", valid_through="1-0"))
    assert not reply.superseded_by(event(EventType.RUN_COMPLETED, "2-0"))
    assert not ReplyText() and reply
