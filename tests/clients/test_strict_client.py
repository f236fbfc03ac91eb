"""The strict typed client ``hermes-agent-api-client==0.3.3`` (issue #21) against a live stack
of real processes (one API, two workers), on the ``echo`` and ``hermes`` backends.

The client (run under Python 3.13 by ``strict_driver.py``) refuses anything outside its
contract with ``HermesProtocolError``: a named frame other than ``hermes.tool.progress``, a
chunk that is neither text, usage, a role nor a finish, anything but ``[DONE]`` after the
finish chunk, a ``hermes`` block that contradicts ``finish_reason``. Every case checks that it
raised nothing and that the stream ended in one of its terminal outcomes (``success``,
``length``, ``upstream_error``) that fits the case. A failure prints every line the driver
reported and its stderr.
"""

from __future__ import annotations

import time

import pytest

from tests.clients.harness import (
    Driver,
    Stack,
    Turn,
    TurnResult,
    is_delta,
    is_response,
    new_session,
)
from tests.support.fake_llm import text_of
from tests.support.polling import eventually

# A stack takes seconds to start, a worker's loss a lease (3 s) to notice.
pytestmark = pytest.mark.timeout(150)


def expect_outcome(driver: Driver, turn: TurnResult, outcome: str) -> None:
    driver.expect(turn.outcome == outcome, f"the stream ended {turn.end}, expected {outcome!r}")


async def test_plain_turn(stack: Stack) -> None:
    driver = await stack.drive(Turn("hello there"))
    await driver.finish(within=30)
    driver.assert_clean(turns=1)
    turn = driver.turn(0)
    expect_outcome(driver, turn, "success")
    driver.expect(turn.text == stack.reply("hello there"), f"unexpected text {turn.text!r}")
    driver.expect(bool(turn.run_id), "no X-Hermes-Run-Id on the response")
    driver.expect(any(e["type"] == "UsageEvent" for e in turn.events), "no usage reported")


async def test_two_turn_session_sees_its_first_turn(stack: Stack) -> None:
    session_id, key = new_session()
    driver = await stack.drive(
        Turn("first question", session_id, key), Turn("second question", session_id, key)
    )
    await driver.finish(within=60)
    driver.assert_clean(turns=2)
    first, second = driver.turn(0), driver.turn(1)
    expect_outcome(driver, first, "success")
    expect_outcome(driver, second, "success")
    driver.expect(first.text == stack.reply("first question"), f"turn 1 said {first.text!r}")
    sessions = [t.response and t.response["session_id"] for t in (first, second)]
    driver.expect(sessions == [session_id] * 2, f"X-Hermes-Session-Id was {sessions}")
    if stack.fake is None:
        expected = "Echo: second question (turn 2)"  # the echo counts the turns it was shown
        driver.expect(second.text == expected, f"turn 2 said {second.text!r}")
        return
    driver.expect(second.text == stack.reply("second question"), f"turn 2 said {second.text!r}")
    sent = stack.fake.chat_requests[-1].body["messages"]
    shown = [(m.get("role"), text_of(m.get("content"))) for m in sent]
    driver.expect(
        ("user", "first question") in shown
        and ("assistant", stack.reply("first question")) in shown,
        f"the model was not shown turn 1: {shown}",
    )


async def test_tool_call_reports_running_then_completed(stack: Stack) -> None:
    text = f"plan my day {stack.backend.tool}"
    driver = await stack.drive(Turn(text))
    await driver.finish(within=30)
    driver.assert_clean(turns=1)
    turn = driver.turn(0)
    expect_outcome(driver, turn, "success")
    # hermes: the model's text, then after the tool a second reply ("Tool said: ...").
    driver.expect(turn.text.startswith(stack.reply(text)), f"unexpected text {turn.text!r}")
    progress = [p for p in turn.tool_progress() if p[1] == stack.backend.tool_name]
    driver.expect(
        [status for _, _, status in progress] == ["running", "completed"]
        and progress[0][0] == progress[1][0],
        f"tool progress of {stack.backend.tool_name}: {progress}",
    )


async def test_agent_failure_is_an_upstream_error(stack: Stack) -> None:
    # echo: [fail] raises mid-reply; hermes: the provider answers 400 (not retried).
    driver = await stack.drive(Turn(f"this breaks {stack.backend.fail}"))
    await driver.finish(within=30)
    driver.assert_clean(turns=1)
    turn = driver.turn(0)
    expect_outcome(driver, turn, "upstream_error")
    reason = turn.end and turn.end.get("failure_reason")
    driver.expect(reason == "agent_error", f"failure_reason {reason!r}, expected 'agent_error'")


async def test_reasoning_turn(stack: Stack) -> None:
    # The client has no reasoning event: reasoning must reach it in a form it accepts and
    # ignores (test_webui_gateway.py checks the reasoning text itself arrives).
    text = f"think it over {stack.backend.reasoning}"
    driver = await stack.drive(Turn(text))
    await driver.finish(within=30)
    driver.assert_clean(turns=1)
    turn = driver.turn(0)
    expect_outcome(driver, turn, "success")
    driver.expect(turn.text == stack.reply(text), f"unexpected text {turn.text!r}")


async def test_stop_mid_stream(stack: Stack) -> None:
    driver = await stack.drive(Turn(stack.slow("please stop me")))
    run_id = (await driver.wait_for(is_response, 30, "the response"))["run_id"]
    await driver.wait_for(is_delta, 30, "a first assistant delta")
    stopped = await stack.stop(run_id)
    await driver.wait_for(lambda line: line["kind"] == "end", 5, "the stream's end within 5 s")
    await driver.finish(within=15)
    driver.assert_clean(turns=1)
    turn = driver.turn(0)
    if stopped.get("status") == "completed":
        # The race a stop can lose: the turn had already finished (about 10 s of tokens make
        # it unlikely); its stream then ends as the completed turn it was.
        expect_outcome(driver, turn, "success")
        return
    expect_outcome(driver, turn, "upstream_error")
    status = await eventually(
        lambda: stack.run_status(run_id), lambda s: s["status"] == "cancelled", what="cancelled"
    )
    driver.expect(status["status"] == "cancelled", f"run status {status}")


async def test_cancel_then_next_turn_starts_at_once(stack: Stack) -> None:
    """The consumer leaves a long turn after its first delta (no cancel_on_disconnect: the
    server may keep it running) and at once asks the next turn on the same session, which
    must not wait for the abandoned one: that one is stopped for it."""
    session_id, key = new_session()
    driver = await stack.drive(
        Turn(stack.slow("abandon me"), session_id, key, close_after_deltas=1),
        Turn("next question", session_id, key),
    )
    await driver.finish(within=60)
    driver.assert_clean(turns=2)
    abandoned, second = driver.turn(0), driver.turn(1)
    driver.expect(bool(abandoned.end and abandoned.end.get("closed")), "turn 1 was not abandoned")
    expect_outcome(driver, second, "success")
    # echo: "(turn 2)" follows when the abandoned turn was kept in the session.
    expected = stack.reply("next question")
    driver.expect(second.text.startswith(expected), f"turn 2 said {second.text!r}")
    # Turn 2 did not wait behind the abandoned turn (~10 s of tokens): that turn was stopped
    # for it, not run to its end. A state, where a time limit flaked on a loaded machine.
    first = abandoned.run_id
    driver.expect(first is not None, "turn 1 has no run id")
    status = await eventually(
        lambda: stack.run_status(str(first)),
        lambda s: s.get("status") in ("completed", "failed", "cancelled"),
        what="turn 1's run ended",
    )
    driver.expect(status["status"] == "cancelled", f"turn 1 ran to its end: {status}")


async def test_cancel_on_disconnect_then_next_turn_keeps_the_transcript_alternating(
    stack: Stack,
) -> None:
    session_id, key = new_session()
    cancel = {"cancel_on_disconnect": True}
    driver = await stack.drive(
        Turn(stack.slow("cancel me"), session_id, key, close_after_deltas=1, extra=cancel),
        Turn("after the cancel", session_id, key),
    )
    await driver.finish(within=60)
    driver.assert_clean(turns=2)
    cancelled, second = driver.turn(0), driver.turn(1)
    driver.expect(bool(cancelled.end and cancelled.end.get("closed")), "turn 1 was not closed")
    expect_outcome(driver, second, "success")

    def settled(messages: list[dict[str, object]]) -> bool:
        return (
            bool(messages)
            and messages[-1].get("role") == "assistant"
            and any("after the cancel" in text_of(m.get("content")) for m in messages)
        )

    messages = await eventually(
        lambda: stack.transcript(session_id), settled, what="turn 2 in the stored transcript"
    )
    roles = [str(m.get("role")) for m in messages]
    alternating = ["user", "assistant"] * (len(roles) // 2)
    rows = "\n".join(f"  {m.get('role')}: {text_of(m.get('content'))[:80]!r}" for m in messages)
    driver.expect(roles == alternating, f"the stored transcript's roles are {roles}:\n{rows}")
    # The model saw turn 2 as its own message (not merged into a dangling turn 1).
    driver.expect(
        second.text.startswith(stack.reply("after the cancel")), f"turn 2 said {second.text!r}"
    )


async def test_worker_killed_mid_stream(stack: Stack) -> None:
    """SIGKILL the worker running the turn after its first delta: the run is retried on the
    other worker (success, the reply ending the stream's text) or ends failed
    (``upstream_error``, e.g. ``worker_lost``)."""
    driver = await stack.drive(Turn(stack.slow("survive a crash", seconds_per_token=0.1)))
    run_id = (await driver.wait_for(is_response, 30, "the response"))["run_id"]
    await driver.wait_for(is_delta, 30, "a first assistant delta")
    (await stack.worker_of(run_id)).kill()
    killed_at = time.monotonic()
    await driver.finish(within=90)
    driver.assert_clean(turns=1)
    turn = driver.turn(0)
    driver.expect(
        turn.outcome in ("success", "upstream_error"),
        f"the stream ended {turn.end} {time.monotonic() - killed_at:.1f} s after the kill",
    )
    if turn.outcome == "success":
        # The long reply: echo pads it with "tick"s, the fake LLM says word0 ... word49.
        last = "tick" if stack.fake is None else "word49"
        driver.expect(
            stack.reply("survive a crash") in turn.text and turn.text.rstrip().endswith(last),
            f"the stream did not end with the whole reply: {turn.text!r}",
        )
    # The stream may end (upstream_error) while the retry still runs: the run itself must end
    # too, never be left running.
    status = await eventually(
        lambda: stack.run_status(run_id),
        lambda s: s["status"] in ("completed", "failed"),
        within=40,
        what=f"{run_id} ending completed or failed",
    )
    driver.expect(status["status"] in ("completed", "failed"), f"run status {status}")


async def test_output_limit_is_a_length_terminal(stack: Stack) -> None:
    driver = await stack.drive(Turn(f"please cut me short {stack.backend.length}"))
    await driver.finish(within=30)
    driver.assert_clean(turns=1)
    turn = driver.turn(0)
    expect_outcome(driver, turn, "length")
    reason = turn.end and turn.end.get("failure_reason")
    driver.expect(reason == "output_truncated", f"failure_reason {reason!r}")
    prefix = stack.backend.reply_prefix.strip()
    driver.expect(turn.text.startswith(prefix), f"no partial reply before the limit: {turn.text!r}")


async def test_worker_killed_between_steps_is_followed_to_the_end(stack: Stack) -> None:
    """The worker is SIGKILLed while a tool runs, so nothing of the interrupted step was
    streamed: the next worker resumes the turn (the tool, which may have had its effect, is
    not run again) and the client's stream simply goes on to a success whose text is the
    turn's reply (hermes: its text before the tool, then its final reply)."""
    text = f"deploy it {stack.backend.slow_tool}"
    driver = await stack.drive(Turn(text))
    run_id = (await driver.wait_for(is_response, 30, "the response"))["run_id"]
    await driver.wait_for(
        lambda line: (
            line.get("type") == "ToolProgressEvent" and line["fields"]["status"] == "running"
        ),
        30,
        "the tool running",
    )
    (await stack.worker_of(run_id)).kill()
    await driver.finish(within=90)
    driver.assert_clean(turns=1)
    turn = driver.turn(0)
    expect_outcome(driver, turn, "success")
    status = await eventually(
        lambda: stack.run_status(run_id), lambda s: s["status"] == "completed", what="completed"
    )
    driver.expect(status["attempt"] == 2, f"run status {status}")
    # echo: the whole reply; hermes: the text before the tool, then the final reply.
    driver.expect(turn.text.endswith(status["output"]), f"the stream said {turn.text!r}")
