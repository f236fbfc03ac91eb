"""The worker's EventSink around the run's ``Attempt``: backend callbacks become its fenced
appends to the run stream.

Appends are group-committed: an event waits only while the previous append is in flight, and
everything that piled up meanwhile goes in the next script call. A turn streaming slowly pays
one round trip per event and no added latency; a fast one pays one round trip per batch instead
of per token. Consecutive ``message.delta`` events of a batch are merged into one (their texts
joined): one stream entry, one frame for clients, one ``XADD`` and one ``PUBLISH`` instead of
one per token. One flusher at a time keeps the stream in emit order, and ``flush()`` must be
awaited before the terminal event is written.

With ``stream_coalesce_ms`` set (80 ms by default), a reply's deltas also wait for company:
after one went out, the next goes no sooner than that many milliseconds later, with every
delta emitted meanwhile. The first delta and every other event go at once (an event that is
not a delta takes the waiting deltas with it), and so does everything once ``flush()`` is
called. It trades up to that much latency per delta for fewer stream entries, frames and Redis
commands per token, where tokens arrive spaced out and nothing is in flight to merge them with.
The agent's progress note (``progress.note``, Hermes' ``reasoning.available``) waits like a
delta: Hermes tells one right after a reply, so it either goes with the ``tool.started`` that
follows at once or, at the end of a turn that writes no transcript, with the terminal events
(``take_unwritten``): one append less per reply, never more than the window late.

Publishing events is the product, not an observer: a failed append is retried with backoff
(with the same batch token, so a lost reply never duplicates events) and, if Redis stays away,
the turn fails loudly (``appends.py``). A refused (fenced) append means another attempt owns the
run.

An approval request parks the turn until someone answers (``approval_wait.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import Callable
from typing import Any

from hermes_queue.agents.base import ApprovalRequest, CancelToken, SubagentPhase, TurnCancelled
from hermes_queue.agents.steps import HandBack, RunBudgetExceeded, Steer, applied_steers
from hermes_queue.events import EventType, message_id_for
from hermes_queue.runs.attempt import Attempt
from hermes_queue.tracing.context import current_turn
from hermes_queue.workers.appends import Event, LeaseLost, coalesce_deltas, retrying
from hermes_queue.workers.approval_wait import Wakeup, await_approval

# Largest batch per script call, and the backlog at which emit() waits for the flusher.
MAX_BATCH = 64
MAX_BACKLOG = 512
# What may wait for the coalescing window (module docstring); anything else goes at once.
_MAY_WAIT = frozenset({EventType.MESSAGE_DELTA, EventType.PROGRESS_NOTE})
# The event loop's timers count whole milliseconds (libuv's): a window ending sooner than that
# is over, and its deltas go now rather than behind a timer of their own (one more wake-up).
_TIMER_RESOLUTION_S = 0.001


class RunEventSink:
    def __init__(
        self,
        attempt: Attempt,
        cancel: CancelToken | None = None,
        wakeup: Wakeup | None = None,
        hand_back: Callable[[], bool] = lambda: False,
        on_first_event: Callable[[], object] | None = None,
        deadline: float | None = None,
    ) -> None:
        """``on_first_event``: told once, at the agent's first event (text, a tool, an
        approval request): not at what the worker itself announces (``run.started``).
        ``deadline``: when the run's budget is spent (unix seconds; its ``execution_policy``),
        checked at each step."""
        self.attempt = attempt
        self._deadline = deadline
        # The run's steers not yet applied, as of the claim and then of each recorded step
        # (SteerSink, agents/steps.py).
        self._steers = tuple(Steer(s.id, s.text) for s in attempt.record.pending_steers)
        self._on_first_event = on_first_event
        self.run_id = attempt.run_id
        # Whether the worker is stopping: then a recorded step is the attempt's last (HandBack).
        self._hand_back = hand_back
        # The run's stop signal and answer doorbell, for approval waits.
        self.cancel = cancel or CancelToken()
        self.wakeup = wakeup or Wakeup()
        self.message_id = message_id_for(self.run_id)
        self._message_started = False
        # Whether this attempt streamed any of the reply's text (message.delta), and the text.
        self.text_streamed = False
        self._streamed: list[str] = []
        self._backlog: list[Event] = []
        # Batch tokens (the append script's retry dedupe): one random prefix per attempt and a
        # counter, not a uuid4 per batch: os.urandom releases the GIL, and on a worker whose
        # agent threads keep the GIL busy the loop then waits to take it back (a profile at 32
        # streaming turns found 22 % of the loop thread's samples there).
        self._batch_prefix = uuid.uuid4().hex
        self._batches = itertools.count()
        self._flusher: asyncio.Task[None] | None = None
        self._failure: Exception | None = None
        # Deltas' coalescing window (module docstring): when the last delta batch went out,
        # how many flush() calls are waiting, and what wakes a held batch early.
        self._coalesce_s = attempt.settings.stream_coalesce_ms / 1000
        self._last_delta_append: float | None = None
        self._flushing = 0
        self._hurry = asyncio.Event()
        self._on_window: Callable[[float], None] | None = None

    def watch_deltas(self, on_window: Callable[[float], None] | None) -> None:
        """``agents.base.WindowedSink``: ``on_window`` is told, each time deltas go out, when
        their window ends (loop time); never without a window."""
        self._on_window = on_window if self._coalesce_s > 0 else None

    async def emit(self, event_type: EventType, data: dict[str, Any]) -> None:
        if self._failure is not None:
            raise self._failure
        self._backlog.append((event_type, data))
        if event_type not in _MAY_WAIT:
            self._hurry.set()
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_backlog())
        elif len(self._backlog) >= MAX_BACKLOG:
            await self.flush()

    async def flush(self) -> None:
        """Wait until every emitted event is in the stream; raise what stopped that."""
        self._flushing += 1
        self._hurry.set()
        try:
            while self._flusher is not None and not self._flusher.done():
                await asyncio.shield(self._flusher)
        finally:
            self._flushing -= 1
        if self._failure is not None:
            raise self._failure

    async def take_unwritten(self) -> list[Event]:
        """The events emitted and not yet in the stream, coalesced and taken off the sink for
        a write that carries them along (a step's record; at the end of a turn that writes no
        transcript, the terminal write, ``Attempt.complete``): one script call, not two. A
        batch the flusher already took is written first, so the stream keeps emit order;
        raises what stopped that batch."""
        batch, self._backlog = coalesce_deltas(self._backlog), []
        self._hurry.set()
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)
        if self._failure is not None:
            raise self._failure
        return batch

    async def write_fenced(self, events: list[Event]) -> None:
        """``events`` (taken with ``take_unwritten``; none is fine) in one fenced append: it
        raises ``LeaseLost`` when this attempt no longer holds the run, written or not."""
        await self._append(events)

    async def _flush_backlog(self) -> None:
        loop = asyncio.get_running_loop()
        while self._backlog and self._failure is None:
            await self._hold_deltas(loop)
            backlog = coalesce_deltas(self._backlog)
            batch, self._backlog = backlog[:MAX_BATCH], backlog[MAX_BATCH:]
            if not batch:  # a step took what was waiting (step())
                break
            if self._coalesce_s > 0 and any(k == EventType.MESSAGE_DELTA for k, _ in batch):
                self._last_delta_append = loop.time()
                if self._on_window is not None:
                    self._on_window(self._last_delta_append + self._coalesce_s)
            try:
                await self._append(batch)
            except Exception as exc:  # LeaseLost, EventPublishFailed, or a bug: stop the turn
                self._failure = exc
                self._backlog.clear()

    async def _hold_deltas(self, loop: asyncio.AbstractEventLoop) -> None:
        """With a coalescing window, hold a backlog of nothing but deltas and notes until the
        window since the last delta batch ends, or something that may not wait arrives. The
        wake-up is cleared before the conditions are read, so none set after the read is
        missed."""
        if self._coalesce_s <= 0 or self._last_delta_append is None:
            return
        self._hurry.clear()
        if self._flushing or any(kind not in _MAY_WAIT for kind, _ in self._backlog):
            return
        wait = self._last_delta_append + self._coalesce_s - loop.time()
        if wait > _TIMER_RESOLUTION_S:  # less is the window's end, come by the loop's clock
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._hurry.wait()

    async def _append(self, batch: list[Event]) -> None:
        token = f"{self._batch_prefix}.{next(self._batches)}"
        ids = await retrying("append", self.run_id, lambda: self.attempt.append(batch, token))
        if ids is None:
            raise LeaseLost(self.run_id)

    async def _ensure_message(self) -> None:
        if not self._message_started:
            self._message_started = True
            await self.emit(EventType.MESSAGE_STARTED, {"message_id": self.message_id})

    async def start_reply(self) -> None:
        """``message.started``, right after the attempt's ``run.started`` (or ``run.restarted``),
        as upstream announces the reply before the agent runs, whatever it then does."""
        await self._ensure_message()

    def continue_reply(self, shown: str) -> None:
        """A resumed attempt goes on with the reply an earlier attempt announced, of which
        readers were shown ``shown`` (``streamed_text`` then starts with it)."""
        self._message_started = True
        if shown:
            self.text_streamed = True
            self._streamed.append(shown)

    # -- StepSink and SteerSink (agents/steps.py) ----------------------------------------------
    @property
    def steers(self) -> tuple[Steer, ...]:
        """The run's steers accepted and not yet applied, as of the last recorded step."""
        return self._steers

    async def step(self, record: dict[str, Any], *, last: bool = False) -> None:
        """Record a finished step durably, with every event emitted before it, in one fenced
        script call (``Attempt.append_step``), taking the steers it applied off the run's
        pending steers; then, if the run's budget is spent, end it there
        (``RunBudgetExceeded``), or if the worker is stopping and the turn goes on after this
        step, hand the run back (``HandBack``)."""
        if self._failure is not None:
            raise self._failure
        batch = await self.take_unwritten()  # they go with the step
        token = f"{self._batch_prefix}.{next(self._batches)}"
        applied = applied_steers(record)
        written = await retrying(
            "step", self.run_id, lambda: self.attempt.append_step(batch, record, token, applied)
        )
        if written is None:
            raise LeaseLost(self.run_id)
        self._steers = tuple(Steer(s.id, s.text) for s in written.pending_steers)
        if last:
            return
        if self._deadline is not None and time.time() >= self._deadline:
            raise RunBudgetExceeded("the run spent its run_budget_seconds")
        if self._hand_back():
            raise HandBack(f"worker stopping after step {record.get('kind')}")

    # -- EventSink --------------------------------------------------------------------------
    def _agent_event(self) -> None:
        if self._on_first_event is not None:
            first, self._on_first_event = self._on_first_event, None
            first()

    async def delta(self, text: str) -> None:
        if not text:
            return
        self._agent_event()
        await self._ensure_message()
        self.text_streamed = True
        self._streamed.append(text)
        await self.emit(EventType.MESSAGE_DELTA, {"delta": text})

    @property
    def streamed_text(self) -> str:
        """The reply text this attempt streamed so far (what its readers were shown)."""
        return "".join(self._streamed)

    async def reasoning(self, text: str) -> None:
        if not text:
            return
        self._agent_event()
        await self._ensure_message()
        await self.emit(EventType.REASONING, {"text": text})

    async def thinking(self, text: str) -> None:
        """The agent's progress note (``agents.base.NoteSink``), not the model's reasoning."""
        if not text:
            return
        self._agent_event()
        await self._ensure_message()
        await self.emit(EventType.PROGRESS_NOTE, {"text": text})

    async def tool_started(
        self,
        name: str,
        call_id: str,
        preview: str | None = None,
        args: Any = None,
        emoji: str | None = None,
    ) -> None:
        self._agent_event()
        if (turn := current_turn()) is not None:
            turn.tool_started(name, call_id)
        await self._ensure_message()
        data = {"tool": name, "tool_call_id": call_id, "preview": preview, "args": args}
        if emoji:
            data["emoji"] = emoji
        await self.emit(EventType.TOOL_STARTED, data)

    async def tool_completed(
        self,
        name: str,
        call_id: str,
        duration: float = 0.0,
        error: bool = False,
        result: str | None = None,
    ) -> None:
        self._agent_event()
        if (turn := current_turn()) is not None:
            turn.tool_completed(name, call_id, error)
        await self._ensure_message()
        await self.emit(
            EventType.TOOL_COMPLETED,
            {
                "tool": name,
                "tool_call_id": call_id,
                "duration": round(duration, 3),
                "error": error,
                "result": result,
            },
        )

    async def subagent(self, phase: SubagentPhase, details: dict[str, Any]) -> None:
        event = EventType.SUBAGENT_START if phase == "start" else EventType.SUBAGENT_COMPLETE
        await self._ensure_message()
        await self.emit(event, dict(details))

    async def approval(self, request: ApprovalRequest) -> str:
        """Ask for consent, park the turn until an answer, a stop or the timeout (then deny)."""
        self._agent_event()
        turn = current_turn()
        if turn is not None:
            return await turn.approval_wait(self._approval(request))
        return await self._approval(request)

    async def _approval(self, request: ApprovalRequest) -> str:
        if self.cancel.cancelled:
            raise TurnCancelled(self.cancel.reason)
        await self.flush()  # the request follows everything the agent emitted before it
        return await await_approval(self.attempt, request, self.cancel, self.wakeup)
