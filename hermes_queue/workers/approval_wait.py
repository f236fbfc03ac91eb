"""A turn parked on an approval request until someone answers from any API replica (see
``hermes_queue.runs.approvals``): the answer wakes it over pub/sub (:class:`Wakeup`), a poll
every heartbeat covers a lost message, a stop request ends the wait, and silence becomes
``deny``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from hermes_queue.agents.base import ApprovalRequest, CancelToken, TurnCancelled
from hermes_queue.runs.attempt import Attempt
from hermes_queue.workers.appends import LeaseLost, retrying

log = logging.getLogger(__name__)


class Wakeup:
    """Wakes every coroutine waiting on the run's approvals (answers arrive over pub/sub).

    A waiter takes its future *before* it reads Redis, so an answer published between the read
    and the wait is never missed.
    """

    def __init__(self) -> None:
        self._waiters: set[asyncio.Future[None]] = set()

    def future(self) -> asyncio.Future[None]:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        waiter.add_done_callback(self._waiters.discard)
        return waiter

    def notify(self) -> None:
        for waiter in list(self._waiters):
            if not waiter.done():
                waiter.set_result(None)


async def await_approval(
    attempt: Attempt,
    request: ApprovalRequest,
    cancel: CancelToken,
    wakeup: Wakeup,
) -> str:
    """Ask for consent and wait for the answer, a stop (``TurnCancelled``) or the timeout (then
    deny)."""
    run_id = attempt.run_id
    request_id = f"apr_{uuid.uuid4().hex}"
    data = request.as_event_data(request_id)
    verdict = await retrying(
        "approval request", run_id, lambda: attempt.request_approval(request_id, data)
    )
    if verdict is None:
        raise LeaseLost(run_id)
    if verdict == "stopping":
        raise TurnCancelled("Stop requested via API")
    settings = attempt.settings
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.approval_timeout_seconds
    stopped = asyncio.ensure_future(cancel.wait())
    try:
        while True:
            woken = wakeup.future()
            try:
                choice = await retrying(
                    "approval poll", run_id, lambda: attempt.approval_choice(request_id)
                )
                if choice is not None:
                    return choice
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return await _time_out(attempt, request_id)
                # Pub/sub wakes us at once; the poll covers a lost message.
                poll = min(settings.heartbeat_seconds, remaining)
                await asyncio.wait(
                    {woken, stopped}, timeout=poll, return_when=asyncio.FIRST_COMPLETED
                )
                if stopped.done():
                    raise TurnCancelled(cancel.reason)
            finally:
                woken.cancel()
    finally:
        stopped.cancel()


async def _time_out(attempt: Attempt, request_id: str) -> str:
    """Silence is not consent: deny, unless an answer won the race."""
    settled = await retrying(
        "approval timeout", attempt.run_id, lambda: attempt.settle_approval(request_id)
    )
    if settled is None:
        raise LeaseLost(attempt.run_id)
    verdict, choice = settled
    if verdict == "timed_out":
        log.info("run %s: approval %s timed out; denied", attempt.run_id, request_id)
    return choice
