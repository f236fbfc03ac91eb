"""Durable steps for Hermes' ``AIAgent`` (agents/steps.py): its loop records each finished step,
and a resumed attempt replays what was recorded instead of running it again.

Hermes 0.19 has no way to continue a turn from a message list (``run_conversation`` always
appends the user message and starts its loop afresh), so a resumed attempt runs the same turn
again and this module makes that run *replay*: the agent's own loop rebuilds its messages, call
count and iteration budget from recorded answers, and goes on live at the first step nobody
recorded. The smallest adapter around the loop is five instance attributes of the turn's agent,
shadowing its methods for this turn only (``install``; ``remove`` takes them away before a warm
agent is kept):

- ``_interruptible_streaming_api_call`` / ``_interruptible_api_call`` (the model call): a
  recorded answer is handed back without an HTTP request (and without its events: readers
  have them); a live one is recorded before the loop sees it;
- ``_execute_tool_calls`` (a batch of tool calls): a recorded result is appended as it was; a
  call in flight when its worker was lost gets ``LOST_TOOL_RESULT`` unless read-only (Hermes'
  own ``NO_EFFECT_TOOL_NAMES``); the rest run through Hermes' executor as usual;
- ``_flush_messages_to_session_db`` (Hermes calls it right after appending each tool result):
  each new tool result is recorded there;
- ``tool_start_callback``: the start of each live tool call is recorded just before it runs;
- ``_apply_pending_steer_to_tool_results`` (Hermes drains ``/steer`` text there: after each tool
  result and at the end of a batch, appending it to the last tool result): the run's pending
  steers (runs/steers.py, as of the step just recorded) go to the agent's own ``steer()`` just
  before, and the tool result that comes out carrying them is recorded again, naming them, so
  a resumed attempt replays the steered result and never applies them again. Steers that found
  no tool result to ride on are taken back from the agent (they stay pending for the next
  boundary, or end as the run's ``pending_steer``): no steer reaches the model unrecorded.

When the worker traces, each live model call (not a replayed one) is also a span
(``current_turn().model_calls``).

Each record goes through ``TurnBridge.checkpoint``, which blocks the agent's thread until the
worker has stored it with the events before it; what stops the attempt (a lost lease, Redis
away, the worker handing the run back) comes back as ``StepInterrupted``, a ``BaseException``,
because Hermes catches ``Exception`` around callbacks and would otherwise send the model call
again. Known limits (docs/reliability.md): context compression and the end-of-budget summary
make model calls of their own, which are not steps (a replay makes them again); state a tool
left on the worker's host (files, a terminal's cwd) is not part of a step.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from hermes_queue.agents.hermes.bridge import TurnBridge
from hermes_queue.agents.steps import (
    LOST_TOOL_RESULT,
    READ_ONLY_TOOLS,
    StepJournal,
    model_step,
    steered,
    tool_result,
    tool_started,
)
from hermes_queue.tracing.context import current_turn

log = logging.getLogger(__name__)

# Instance attributes this module sets on an agent (``remove`` deletes them).
_SEAMS = (
    "_interruptible_streaming_api_call",
    "_interruptible_api_call",
    "_execute_tool_calls",
    "_flush_messages_to_session_db",
    "_apply_pending_steer_to_tool_results",
)
# Keys of an answer that stay plain JSON when it is rebuilt (everything else structural becomes
# attributes again, as Hermes' transport reads them with getattr).
_PLAIN = frozenset({"extra_content", "reasoning_details", "model_extra", "arguments"})
# Private marks Hermes' stream helpers leave on an answer (a partial stream, dropped tools).
_MARKS = ("_dropped_tool_names", "_content_filter_terminated")


def read_only_tools() -> frozenset[str]:
    """Hermes' own list of tools without effect, where it has one (else ours, a copy of it)."""
    try:
        from agent.tool_result_classification import NO_EFFECT_TOOL_NAMES
    except ImportError:
        return READ_ONLY_TOOLS
    return frozenset(NO_EFFECT_TOOL_NAMES)


def dump(value: Any) -> Any:
    """A model answer (openai objects, Hermes' namespaces) as plain JSON."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {str(k): dump(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [dump(item) for item in value]
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        data = dump(model_dump())
    elif hasattr(value, "__dict__"):
        data = {k: dump(v) for k, v in vars(value).items() if not k.startswith("__")}
    else:
        return str(value)
    for mark in _MARKS:
        if hasattr(value, mark):
            data[mark] = dump(getattr(value, mark))
    return data


def load(value: Any, key: str = "") -> Any:
    """``dump``'s output as attributes again, structural levels only."""
    if isinstance(value, list):
        return [load(item, key) for item in value]
    if isinstance(value, dict) and key not in _PLAIN:
        return SimpleNamespace(**{k: load(v, k) for k, v in value.items()})
    return value


def answer_message(answer: dict[str, Any]) -> dict[str, Any]:
    """The assistant message a dumped answer carries, as a transcript shows it."""
    choices = answer.get("choices") or [{}]
    message = choices[0].get("message") or {}
    shown: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    calls = message.get("tool_calls") or []
    if calls:
        shown["tool_calls"] = [
            {"id": c.get("id"), "type": "function", "function": c.get("function")} for c in calls
        ]
    return shown


class DurableTurn:
    """One turn's seams on one agent (see the module docstring)."""

    def __init__(self, agent: Any, bridge: TurnBridge, journal: StepJournal) -> None:
        self.agent = agent
        self.bridge = bridge
        self.journal = journal
        self.read_only = read_only_tools()
        self._calls = 0  # model calls of this turn so far, replayed ones included
        self._inside = threading.local()  # a model call within a model call passes through
        self._recorded: dict[str, Any] = {}  # tool call id -> content recorded this attempt
        self._names: dict[str, str] = {}  # tool call ids this turn's answers asked for
        for record in journal.records:
            if record.get("kind") == "tool":
                self._recorded[str(record["call_id"])] = record["message"].get("content")

    # -- installing ------------------------------------------------------------------------------
    def install(self) -> None:
        agent, cls = self.agent, type(self.agent)
        streaming = cls._interruptible_streaming_api_call.__get__(agent)
        plain = cls._interruptible_api_call.__get__(agent)
        flush = cls._flush_messages_to_session_db.__get__(agent)
        if (turn := current_turn()) is not None:  # a span per live model call
            streaming = turn.model_calls(streaming, streaming=True)
            plain = turn.model_calls(plain, streaming=False)
        agent._interruptible_streaming_api_call = self._model_call(streaming)
        agent._interruptible_api_call = self._model_call(plain)
        agent._execute_tool_calls = self._execute_tool_calls
        agent._flush_messages_to_session_db = self._flushing(flush)
        apply_steers = getattr(cls, "_apply_pending_steer_to_tool_results", None)
        if apply_steers is not None:  # Hermes with /steer (0.19 has it)
            agent._apply_pending_steer_to_tool_results = self._steering(apply_steers.__get__(agent))
        started = agent.tool_start_callback
        agent.tool_start_callback = self._tool_start(started)

    @staticmethod
    def remove(agent: Any) -> None:
        for name in _SEAMS:
            agent.__dict__.pop(name, None)

    # -- model calls -----------------------------------------------------------------------------
    def _model_call(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(api_kwargs: dict[str, Any], **kwargs: Any) -> Any:
            if getattr(self._inside, "active", False):
                return original(api_kwargs, **kwargs)
            index, self._calls = self._calls, self._calls + 1
            recorded = self.journal.model(index)
            if recorded is not None:  # finished by an earlier attempt: never sent again
                self.bridge.quiet = True
                answer = recorded["answer"]
                self._expect(answer)
                return load(answer)
            self.bridge.quiet = False
            self._inside.active = True
            try:
                response = original(api_kwargs, **kwargs)
            finally:
                self._inside.active = False
            answer = dump(response)
            message = answer_message(answer)
            self._expect(answer)
            last = not message.get("tool_calls")
            self.bridge.checkpoint(model_step(index, message, answer=answer), last=last)
            return response

        return call

    def _expect(self, answer: dict[str, Any]) -> None:
        for call in answer_message(answer).get("tool_calls") or []:
            self._names[str(call.get("id"))] = str((call.get("function") or {}).get("name"))

    # -- tool calls ------------------------------------------------------------------------------
    def _tool_start(self, started: Callable[..., Any] | None) -> Callable[..., Any]:
        def on_start(call_id: str, name: str, args: Any) -> None:
            if self.journal.in_flight(call_id):
                return  # a read-only call run again: its start stands from the lost attempt
            if started is not None:
                started(call_id, name, args)
            self.bridge.checkpoint(tool_started(call_id, name, args))

        return on_start

    def _execute_tool_calls(
        self,
        assistant_message: Any,
        messages: list[dict[str, Any]],
        effective_task_id: str,
        api_call_count: int = 0,
    ) -> None:
        agent, journal = self.agent, self.journal
        execute = type(agent)._execute_tool_calls
        pending: list[Any] = []

        def run_pending() -> None:
            if pending:
                self.bridge.quiet = False
                batch = SimpleNamespace(tool_calls=list(pending))
                execute(agent, batch, messages, effective_task_id, api_call_count)
                pending.clear()

        replayed_todo = False
        for call in assistant_message.tool_calls or []:
            call_id, name = str(call.id), str(call.function.name)
            recorded = journal.result(call_id)
            if recorded is not None:
                run_pending()
                messages.append(copy.deepcopy(recorded["message"]))
                replayed_todo = replayed_todo or name == "todo"
            elif journal.in_flight(call_id) and name not in self.read_only:
                run_pending()
                messages.append(self._lost(call_id, name))
            else:
                pending.append(call)
        run_pending()
        if replayed_todo:  # Hermes' todo store learns of replayed results from the messages
            agent._hydrate_todo_store(messages)

    def _lost(self, call_id: str, name: str) -> dict[str, Any]:
        """The result of a call whose worker was lost while it ran (and may have had its
        effect): recorded, and told to readers as a failed completion."""
        try:
            from agent.tool_dispatch_helpers import make_tool_result_message

            message = make_tool_result_message(
                name, LOST_TOOL_RESULT, call_id, effect_disposition="unknown"
            )
        except ImportError:
            message = {"role": "tool", "tool_call_id": call_id, "content": LOST_TOOL_RESULT}
        self.bridge.tell_lost(call_id, name, LOST_TOOL_RESULT)
        self._recorded[call_id] = message.get("content")
        self.bridge.checkpoint(tool_result(call_id, name, dict(message), lost=True))
        return dict(message)

    def _flushing(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def flush(messages: list[dict[str, Any]], conversation_history: Any = None) -> Any:
            for message in messages:
                call_id = str(message.get("tool_call_id") or "")
                if message.get("role") != "tool" or call_id not in self._names:
                    continue
                content = message.get("content")
                if call_id in self._recorded and self._recorded[call_id] == content:
                    continue
                self._recorded[call_id] = content
                name = self._names[call_id]
                self.bridge.checkpoint(tool_result(call_id, name, copy.deepcopy(message)))
            return original(messages, conversation_history)

        return flush

    # -- steers ----------------------------------------------------------------------------------
    def _steering(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def apply(messages: list[dict[str, Any]], num_tool_msgs: int) -> Any:
            pending = self.bridge.steers()
            if not pending or self.bridge.quiet or num_tool_msgs <= 0:
                return original(messages, num_tool_msgs)
            agent = self.agent
            for steer in pending:
                agent.steer(steer.text)  # Hermes' own: appended below, with its marker
            tail = [m for m in messages[-num_tool_msgs:] if isinstance(m, dict)]
            before = [copy.deepcopy(m.get("content")) for m in tail]
            original(messages, num_tool_msgs)
            carrier = None
            for message, content in zip(tail, before, strict=True):
                if message.get("role") == "tool" and message.get("content") != content:
                    carrier = message
            if carrier is None:  # no tool result took them: they stay pending in the run
                agent._drain_pending_steer()
                return None
            call_id = str(carrier.get("tool_call_id") or "")
            name = self._names.get(call_id, str(carrier.get("name") or ""))
            self._recorded[call_id] = carrier.get("content")
            record = tool_result(call_id, name, copy.deepcopy(carrier))
            self.bridge.checkpoint(steered(record, pending))
            return None

        return apply
