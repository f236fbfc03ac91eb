"""The bridge and a sink's delta window (``agents/hermes/bridge.py``): after text went to a sink
that holds deltas for a window anyway (``WindowedSink``), the next deltas wait on the agent's
side and reach the sink together before the window ends; anything else the agent reports takes
them along, in order. No Hermes needed: the agent's thread is played by a plain thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from hermes_queue.agents.hermes.bridge import TurnBridge
from tests.agents.test_echo import RecordingSink
from tests.support.polling import eventually


class WindowedRecordingSink(RecordingSink):
    """A sink with a delta window (``agents.base.WindowedSink``) that sends each delta it is
    given at once, so each starts a window; ``deltas`` counts them for the agent's thread."""

    def __init__(self, window: float) -> None:
        super().__init__()
        self.window = window
        self.deltas = threading.Semaphore(0)
        self.on_window: Callable[[float], None] | None = None

    def watch_deltas(self, on_window: Callable[[float], None] | None) -> None:
        self.on_window = on_window

    async def delta(self, text: str) -> None:
        await super().delta(text)
        if self.on_window is not None:
            self.on_window(asyncio.get_running_loop().time() + self.window)
        self.deltas.release()


async def agent(bridge: TurnBridge, script: Callable[[], None]) -> None:
    """Run ``script`` on a thread as the agent would, then end the turn, with the pump on."""
    pump = asyncio.ensure_future(bridge.pump())

    def thread() -> None:
        script()
        bridge.close()

    await asyncio.to_thread(thread)
    await asyncio.wait_for(pump, 10)
    assert bridge.failure is None


def bridge_for(sink: RecordingSink) -> TurnBridge:
    return TurnBridge(asyncio.get_running_loop(), sink, "run_x", interrupt=lambda reason: None)


async def test_deltas_inside_the_window_go_together_with_what_follows_in_order() -> None:
    sink = WindowedRecordingSink(window=60.0)  # nothing ends the window in this test
    bridge = bridge_for(sink)

    def script() -> None:
        bridge.on_delta("a")
        assert sink.deltas.acquire(timeout=10)  # the first delta went at once
        for text in ("b", "c", "d"):
            bridge.on_delta(text)
        bridge.on_tool_start("call_1", "terminal", {"command": "ls"})
        bridge.on_tool_complete("call_1", "terminal", {"command": "ls"}, "ok")
        bridge.on_delta("e")

    await agent(bridge, script)
    assert sink.events == [
        ("delta", "a"),
        ("delta", "bcd"),
        ("tool_started", "terminal", "call_1", None, {"command": "ls"}),
        ("tool_completed", "terminal", "call_1", 0.0, False, "ok"),
        ("delta", "e"),
    ]
    assert sink.on_window is None  # the bridge stopped watching when the turn ended


async def test_held_deltas_reach_the_sink_when_the_window_ends_with_nothing_else_posted() -> None:
    sink = WindowedRecordingSink(window=0.05)
    bridge = bridge_for(sink)
    pump = asyncio.ensure_future(bridge.pump())
    bridge.on_delta("a")
    await eventually(lambda: sink.text == "a", within=10, what="the first delta")
    await asyncio.to_thread(bridge.on_delta, "b")
    await eventually(lambda: sink.text == "ab", within=10, what="the held delta")
    bridge.close()
    await asyncio.wait_for(pump, 10)
    assert sink.events == [("delta", "a"), ("delta", "b")]


async def test_without_a_window_a_delta_is_not_held_nor_merged() -> None:
    sink = RecordingSink()
    bridge = bridge_for(sink)
    pump = asyncio.ensure_future(bridge.pump())
    bridge.on_delta("a")
    await eventually(lambda: sink.text == "a", within=10, what="the first delta")
    await asyncio.to_thread(bridge.on_delta, "b")
    await eventually(lambda: sink.text == "ab", within=10, what="the second delta")

    def burst() -> None:
        for text in ("c", "d", "e"):
            bridge.on_delta(text)
        bridge.close()

    await asyncio.to_thread(burst)
    await asyncio.wait_for(pump, 10)
    assert sink.events == [("delta", text) for text in "abcde"]


async def test_the_end_of_the_turn_takes_held_deltas_along() -> None:
    sink = WindowedRecordingSink(window=60.0)
    bridge = bridge_for(sink)

    def script() -> None:
        bridge.on_delta("a")
        assert sink.deltas.acquire(timeout=10)
        bridge.on_delta("b")
        bridge.on_delta("c")

    await agent(bridge, script)
    assert sink.events == [("delta", "a"), ("delta", "bc")]
