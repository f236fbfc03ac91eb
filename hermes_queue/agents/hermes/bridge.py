"""Hermes' callbacks, called on the agent's thread, become in-order sink calls on the loop.

The agent runs synchronously in a worker thread and reports progress through plain callbacks.
Each callback only appends a small closure (or a delta's text) to an inbox under a lock and,
unless a wake-up is already on its way, wakes the loop (``call_soon_threadsafe``), so the agent
never waits on Redis and the event loop never waits on the agent; one pump coroutine takes
what the inbox holds and awaits the sink in emit order. The inbox is unbounded on purpose: the
agent thread must not block inside a callback (Hermes holds locks around some of them), and a
turn's events are bounded by what one model stream produces.

Deltas need not wake the loop one by one. A sink that holds deltas for a window after some
went out (``WindowedSink``: the worker's 80 ms ``stream_coalesce_ms``) sends nothing sooner
than that window's end anyway. It tells the bridge when each window ends; until then the
deltas that come wait in the inbox, and a timer on the loop hands them to the sink at the
window's end, which sends them at once (its window is over): one wake-up of the loop per
window (a timer that fetched them shortly before the sink's own flush timer was two); a delta
after that goes at once, as before. Each delta thus goes out with the same flush as when it
woke the loop itself, and anything else the agent reports still wakes the loop at once and
takes the waiting deltas along, in order. Each token used to cost a thread → loop wake-up;
now a window's tokens cost one.

Approvals use Hermes' gateway mechanism (``tools.approval``): under the turn's approval key the
agent thread parks on its own event after calling our notify callback; the pump asks
``sink.approval`` (Redis, any API replica answers) and hands the choice back with
``resolve_gateway_approval``.

Hermes' own ``reasoning.available`` progress note (the text of each model reply that has any,
first 500 characters, told before that reply's tools run) is what upstream's API server shows
as ``tool.progress`` (``_thinking``) on its session stream and as ``reasoning.available`` on its
runs stream. It goes to a sink that takes notes (``NoteSink.thinking``); it is not the model's
reasoning, which arrives streamed through ``reasoning_callback`` (``sink.reasoning``), and a
sink without ``thinking`` does not get it.

Delegation (Hermes' ``delegate_task``) relays its child agents' progress through the parent's
``tool_progress_callback``. Only ``subagent.start`` and ``subagent.complete`` go on, as upstream
forwards them on its runs stream (upstream-api.md §3.3): whitelisted fields, free text redacted. The
child's thinking, streamed text, tool calls and batched progress are dropped, as upstream does.

The first failure of a sink call (a lost lease, Redis gone, a stop while waiting for consent)
is kept, the agent is interrupted, and the backend re-raises it once the thread has returned.

Durable steps (``durable.py``) are the one place the agent thread does wait: ``checkpoint``
blocks it until the worker has stored a finished step, in order after every event posted before
it, and raises ``StepInterrupted`` on that thread when it could not be (the failure is kept as
above). While the agent replays recorded steps (``quiet``) its callbacks tell nothing: readers
have those events from the attempt that recorded them. Each recorded step also tells the sink
the run's pending steers, which ``steers`` hands the agent thread at its next tool-result
boundary.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable
from typing import Any

from hermes_queue.agents.base import (
    ApprovalRequest,
    EventSink,
    NoteSink,
    WindowedSink,
)
from hermes_queue.agents.hermes.checkpoints import Checkpoint, StepInterrupted
from hermes_queue.agents.hermes.tool_events import (
    RESULT_LIMIT,
    SUBAGENT_PHASES,
    subagent_details,
    tool_emoji,
)
from hermes_queue.agents.steps import Steer, SteerSink, StepSink

log = logging.getLogger(__name__)

Call = Callable[[], Awaitable[None]]
# How often a thread waiting on a checkpoint looks whether the pump is still there.
_CHECKPOINT_POLL_SECONDS = 1.0


class TurnBridge:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sink: EventSink,
        approval_key: str,
        interrupt: Callable[[str], None],
        scrub: Callable[[str], str] = lambda text: text,
    ) -> None:
        self._loop = loop
        self._sink = sink
        self._approval_key = approval_key
        self._interrupt = interrupt
        self._scrub = scrub
        # Posted and not yet taken by the pump, in emit order: calls, delta texts (str), and
        # None for the end. ``_rung``: a wake-up is on its way; ``_hold_until``
        # (time.monotonic): until then a delta waits for the loop's timer (module docstring).
        self._lock = threading.Lock()
        self._inbox: list[Call | str | None] = []
        self._rung = False
        self._hold_until = 0.0
        self._ready = asyncio.Event()
        self._hold_timer: asyncio.TimerHandle | None = None
        self._windowed = sink if isinstance(sink, WindowedSink) else None
        if self._windowed is not None:
            self._windowed.watch_deltas(self._hold)
        self._notes = sink if isinstance(sink, NoteSink) else None
        self.failure: BaseException | None = None
        # Tool progress arrives in two halves (a preview keyed by name, then the call id), so
        # the first half waits here; FIFO per name keeps parallel calls of one tool apart.
        self._previews: defaultdict[str, deque[str | None]] = defaultdict(deque)
        self._outcomes: defaultdict[str, deque[tuple[float, bool]]] = defaultdict(deque)
        self._open_calls: dict[str, str] = {}  # call id -> tool name, started but not completed
        # While the agent replays recorded steps nothing it reports is told again (durable.py).
        self.quiet = False
        self._pumping = True  # False once the pump is gone: a waiting checkpoint gives up

    # -- the agent thread's side ---------------------------------------------------------------

    def _post(self, call: Call | None) -> None:
        if self.quiet and call is not None and not isinstance(call, Checkpoint):
            return
        self._put(call, urgent=True)

    def _put(self, item: Call | str | None, *, urgent: bool) -> None:
        """Into the inbox; the loop is woken unless a wake-up is on its way already, or this is
        a delta inside a hold (the hold's timer fetches it)."""
        with self._lock:
            self._inbox.append(item)
            ring = not self._rung and (urgent or time.monotonic() >= self._hold_until)
            if ring:
                self._rung = True
        if ring:
            try:
                self._loop.call_soon_threadsafe(self._ready.set)
            except RuntimeError:  # the loop is closing (worker shutdown): nothing to report to
                pass

    def on_delta(self, text: str | None) -> None:
        # None marks the end of one streamed segment; the events carry only text.
        if text and not self.quiet:
            self._put(text, urgent=False)

    def on_reasoning(self, text: str | None) -> None:
        if text:
            self._post(lambda: self._sink.reasoning(text))

    def on_progress(
        self,
        event_type: str,
        name: str | None = None,
        preview: str | None = None,
        args: Any = None,
        **details: Any,
    ) -> None:
        """Hermes' ``tool_progress_callback``: the preview and timing halves of tool events,
        its progress notes (``reasoning.available``, to a ``NoteSink``), and the start and end
        of delegated child agents.

        Not forwarded: ``_thinking`` (a child's first line of content; Hermes relays it to the
        parent as ``subagent.thinking``), ``subagent.text``, ``subagent.tool`` and the batched
        ``subagent.progress`` / ``subagent_progress``: upstream's runs stream drops them too,
        and they would put a child's unredacted text in the parent's events."""
        if event_type == "reasoning.available":
            notes = self._notes
            if notes is not None and preview:
                self._post(lambda: notes.thinking(preview))
        elif event_type == "tool.started" and name:
            self._post(lambda: self._remember_preview(name, preview))
        elif event_type == "tool.completed" and name:
            outcome = (float(details.get("duration") or 0.0), bool(details.get("is_error")))
            self._post(lambda: self._remember_outcome(name, outcome))
        elif (phase := SUBAGENT_PHASES.get(event_type)) is not None:
            # Filtered and redacted here, on the agent's thread: the loop only appends.
            kept = subagent_details({**details, "preview": preview}, self._scrub)
            self._post(lambda: self._sink.subagent(phase, kept))

    def on_tool_start(self, call_id: str, name: str, args: Any) -> None:
        self._post(lambda: self._tool_started(call_id, name, args))

    def on_tool_complete(self, call_id: str, name: str, args: Any, result: Any) -> None:
        self._post(lambda: self._tool_completed(call_id, name, result))

    def on_approval(self, data: dict[str, Any]) -> None:
        """Hermes' gateway notify callback; the thread then parks until the choice arrives."""
        keys = data.get("pattern_keys") or []
        request = ApprovalRequest(
            command=self._scrub(str(data.get("command") or "")),
            description=self._scrub(str(data.get("description") or "")),
            pattern_key=str(data.get("pattern_key") or ""),
            pattern_keys=tuple(str(key) for key in keys if key),
            allow_permanent=data.get("allow_permanent") is not False,
        )
        self._post(lambda: self._approve(request))

    def checkpoint(self, record: dict[str, Any], *, last: bool = False) -> None:
        """Record a finished step (``StepSink.step``) and wait until it is stored; raises
        ``StepInterrupted`` when it was not, or the attempt must end after it."""
        steps = self._sink
        if not isinstance(steps, StepSink):
            return
        posted = Checkpoint(steps, record, last)
        self._post(posted)
        while True:
            try:
                posted.done.result(timeout=_CHECKPOINT_POLL_SECONDS)
                return
            except concurrent.futures.TimeoutError:
                if not self._pumping:
                    raise StepInterrupted("the worker stopped taking events") from None
            except BaseException as exc:
                raise StepInterrupted(f"step not recorded: {type(exc).__name__}") from exc

    def steers(self) -> tuple[Steer, ...]:
        """The run's steers not yet applied, as of the last step recorded (a ``SteerSink``'s;
        none for another sink). Read on the agent thread: the sink updates them before the
        checkpoint that recorded the step lets that thread go on."""
        sink = self._sink
        return sink.steers if isinstance(sink, SteerSink) else ()

    def tell_lost(self, call_id: str, name: str, result: str) -> None:
        """A tool call whose worker was lost while it ran ends, for readers, as a failure."""
        self._open_calls[call_id] = name
        quiet, self.quiet = self.quiet, False
        self._post(lambda: self._lost(call_id, name, result))
        self.quiet = quiet

    async def _lost(self, call_id: str, name: str, result: str) -> None:
        self._open_calls.pop(call_id, None)
        await self._sink.tool_completed(name, call_id, error=True, result=result)

    def close(self) -> None:
        """The agent returned: the pump ends once everything posted before is through."""
        self._post(None)

    # -- the loop's side -------------------------------------------------------------------------

    async def pump(self) -> None:
        """Deliver posted calls in order until ``close``; after a failure, drop the rest."""
        try:
            while await self._deliver(await self._take()):
                pass
            await self._close_open_calls()
        finally:
            self._pumping = False
            if self._windowed is not None:
                self._windowed.watch_deltas(None)
            if self._hold_timer is not None:
                self._hold_timer.cancel()

    async def _take(self) -> list[Call | str | None]:
        """What the inbox holds, once there is something and the loop was woken for it."""
        await self._ready.wait()
        self._ready.clear()
        with self._lock:
            items, self._inbox = self._inbox, []
            self._rung = False
        return items

    async def _deliver(self, items: list[Call | str | None]) -> bool:
        """To the sink in order; False once ``close`` was among them (it is the last thing
        posted). Consecutive deltas go as one to a windowed sink (it would merge them into
        one stream entry anyway), one by one to another."""
        texts: list[str] = []
        for item in items:
            if isinstance(item, str):
                texts.append(item)
                continue
            await self._deliver_text(texts)
            texts = []
            if item is None:
                return False
            await self._call(item)
        await self._deliver_text(texts)
        return True

    async def _deliver_text(self, texts: list[str]) -> None:
        """The texts as deltas: to a windowed sink as one (it would merge them anyway), to
        another one by one."""
        if self._windowed is not None:
            texts = ["".join(texts)] if texts else []
        for text in texts:
            await self._call(functools.partial(self._sink.delta, text))

    async def _call(self, call: Call) -> None:
        if self.failure is not None:
            if isinstance(call, Checkpoint):
                call.refuse(self.failure)
            return
        try:
            await call()
        except Exception as exc:  # kept, re-raised by the backend after the thread ends
            self.failure = exc
            self._interrupt(f"event publishing stopped: {type(exc).__name__}")
            self._answer("deny", everything=True)

    def _hold(self, window_end: float) -> None:
        """The sink sent deltas, whose window ends at ``window_end`` (loop time): the deltas
        posted until then wait in the inbox for the timer (module docstring)."""
        hold_for = window_end - self._loop.time()
        if hold_for <= 0:
            return
        with self._lock:
            self._hold_until = time.monotonic() + hold_for
        if self._hold_timer is not None:
            self._hold_timer.cancel()
        self._hold_timer = self._loop.call_later(hold_for, self._hold_ends)

    def _hold_ends(self) -> None:
        self._hold_timer = None
        with self._lock:
            self._hold_until = 0.0
            ring = bool(self._inbox) and not self._rung
            if ring:
                self._rung = True
        if ring:
            self._ready.set()

    async def _remember_preview(self, name: str, preview: str | None) -> None:
        self._previews[name].append(preview)

    async def _remember_outcome(self, name: str, outcome: tuple[float, bool]) -> None:
        self._outcomes[name].append(outcome)

    async def _tool_started(self, call_id: str, name: str, args: Any) -> None:
        previews = self._previews[name]
        preview = previews.popleft() if previews else None
        self._open_calls[call_id] = name
        await self._sink.tool_started(
            name, call_id, preview=preview, args=args, emoji=tool_emoji(name)
        )

    async def _tool_completed(self, call_id: str, name: str, result: Any) -> None:
        outcomes = self._outcomes[name]
        duration, error = outcomes.popleft() if outcomes else (0.0, False)
        self._open_calls.pop(call_id, None)
        text = result if isinstance(result, str) else str(result)
        await self._sink.tool_completed(
            name, call_id, duration=duration, error=error, result=text[:RESULT_LIMIT]
        )

    async def _close_open_calls(self) -> None:
        """A call Hermes blocked (guardrail) or abandoned (interrupt) never completes on its
        own; clients waiting for its ``tool.completed`` get one marked as an error."""
        if self.failure is not None:
            return
        for call_id, name in list(self._open_calls.items()):
            try:
                await self._sink.tool_completed(name, call_id, error=True, result="not completed")
            except Exception as exc:
                self.failure = exc
                return
        self._open_calls.clear()

    async def _approve(self, request: ApprovalRequest) -> None:
        try:
            choice = await self._sink.approval(request)
        except BaseException:
            self._answer("deny", everything=True)  # never leave the agent thread parked
            raise
        self._answer(choice)

    def _answer(self, choice: str, *, everything: bool = False) -> None:
        """Hand a choice to the oldest parked request (Hermes queues them FIFO, and the pump
        asks in the same order), or to all of them."""
        from tools.approval import resolve_gateway_approval

        resolve_gateway_approval(self._approval_key, choice, resolve_all=everything)
