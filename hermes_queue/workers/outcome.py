"""How a claimed run ends: completed, failed, cancelled, or handed back to the queue.

Every terminal write is fenced by the attempt; a refused one means the reaper or another attempt
already settled the run, which is logged and otherwise fine.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from hermes_queue.agents.base import AgentResult
from hermes_queue.events import EventType
from hermes_queue.runs.model import FailReason, RunStatus
from hermes_queue.runs.repository import RunRepository

log = logging.getLogger(__name__)


async def settle(
    repo: RunRepository,
    run_id: str,
    attempt: int,
    status: RunStatus,
    event_type: EventType,
    data: dict[str, Any],
    fields: dict[str, str] | None = None,
) -> None:
    try:
        written = await repo.finish(run_id, attempt, status, event_type, data, fields)
    except Exception:
        # The lease lapses and the reaper settles the run; log and move on.
        log.exception("run %s: could not write its terminal event", run_id)
        return
    if written is None:
        log.warning("run %s attempt %d: terminal write fenced off", run_id, attempt)


async def fail(
    repo: RunRepository, run_id: str, attempt: int, error: str, reason: FailReason
) -> None:
    details = {"error": error, "reason": reason}
    await settle(repo, run_id, attempt, RunStatus.FAILED, EventType.RUN_FAILED, details, details)


async def cancel(repo: RunRepository, run_id: str, attempt: int) -> None:
    await settle(repo, run_id, attempt, RunStatus.CANCELLED, EventType.RUN_CANCELLED, {})


async def complete(repo: RunRepository, run_id: str, attempt: int, result: AgentResult) -> None:
    usage = result.usage.as_dict()
    await settle(
        repo,
        run_id,
        attempt,
        RunStatus.COMPLETED,
        EventType.RUN_COMPLETED,
        {
            "output": result.output,
            "usage": usage,
            "messages": result.messages,
            "runtime": result.runtime,
        },
        {"output": result.output, "usage": json.dumps(usage)},
    )


async def hand_back(repo: RunRepository, run_id: str, attempt: int) -> None:
    """Worker shutdown: give the run back to the queue, or cancel it if a stop is pending."""
    try:
        if await repo.release(run_id, attempt) == "stopping":
            await cancel(repo, run_id, attempt)
    except Exception:
        log.exception("run %s: hand-back failed; the reaper will settle it", run_id)
