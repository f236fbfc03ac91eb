"""A durable step posted to the worker's loop like the bridge's other calls, on which the agent
thread waits (``TurnBridge.checkpoint``), and how that wait ends when the step was not stored."""

from __future__ import annotations

import concurrent.futures
from typing import Any

from hermes_queue.agents.steps import StepSink


class StepInterrupted(BaseException):
    """Raised on the agent thread when a step could not be recorded, or was the attempt's last
    (the worker hands the run back): the turn must stop at once. A ``BaseException``, so
    Hermes' ``except Exception`` around callbacks and retries lets it through; the cause is in
    ``TurnBridge.failure``."""


class Checkpoint:
    """A step to record, posted like the other calls; the agent thread waits on ``done``."""

    def __init__(self, sink: StepSink, record: dict[str, Any], last: bool) -> None:
        self.sink, self.record, self.last = sink, record, last
        self.done: concurrent.futures.Future[None] = concurrent.futures.Future()

    async def __call__(self) -> None:
        try:
            await self.sink.step(self.record, last=self.last)
        except BaseException as exc:
            self.refuse(exc)
            raise
        self.done.set_result(None)

    def refuse(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)
