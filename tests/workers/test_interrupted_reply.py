"""What a stopped turn leaves in its transcript (``workers/persistence.interrupted_reply``): the
backend's finished messages, then the text readers were shown that they do not hold yet, so a
user message is always answered before the next one."""

from __future__ import annotations

from typing import Any

from hermes_queue.workers.persistence import INTERRUPTED, interrupted_reply

CALL = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1"}]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "ok"}


def shape(messages: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    return [(m["role"], m["content"], m.get("finish_reason")) for m in messages]


def test_text_shown_before_the_stop_is_kept_after_the_finished_tools() -> None:
    kept = interrupted_reply([CALL, RESULT], "Echo: a b", now=1.0)
    assert shape(kept) == [
        ("assistant", "", None),
        ("tool", "ok", None),
        ("assistant", "Echo: a b", INTERRUPTED),
    ]


def test_only_the_text_the_finished_messages_lack_is_added() -> None:
    said = {"role": "assistant", "content": "First. ", "tool_calls": [{"id": "c1"}]}
    kept = interrupted_reply([said, RESULT], "First. Then", now=1.0)
    assert shape(kept)[-1] == ("assistant", "Then", INTERRUPTED)


def test_a_stop_before_any_text_still_answers_the_user() -> None:
    assert shape(interrupted_reply([], "", now=1.0)) == [("assistant", "", INTERRUPTED)]


def test_a_closing_message_of_the_agent_is_marked_rather_than_doubled() -> None:
    closed = {"role": "assistant", "content": "Operation interrupted."}
    kept = interrupted_reply([CALL, RESULT, closed], "", now=1.0)
    assert shape(kept)[-1] == ("assistant", "Operation interrupted.", INTERRUPTED)
    assert len(kept) == 3 and "finish_reason" not in closed  # the backend's list is untouched


def test_whitespace_the_backend_trimmed_adds_nothing() -> None:
    """Hermes keeps a stopped model call's streamed text stripped ("You" of "You ")."""
    kept = interrupted_reply([{"role": "assistant", "content": "You"}], "You ", now=1.0)
    assert shape(kept) == [("assistant", "You", INTERRUPTED)]
