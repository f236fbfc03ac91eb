"""Runs of several tenants queued on one shard, for the tests of fair turns and running limits
(``runs/lua/prelude.lua``), against a real Redis."""

from __future__ import annotations

from typing import Any

from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest


def repository(redis: Any, settings: Settings, **overrides: Any) -> RunRepository:
    """A repository under ``settings`` with ``overrides`` (``tenant_weights``, …)."""
    settings = settings.replace(**overrides)
    return RunRepository(redis, settings.redis.keys, settings.runs)


async def queue(repo: RunRepository, tenant: str, count: int, session: str = "s") -> list[str]:
    """``count`` runs of ``tenant`` created on ``session``, oldest first."""
    ids = []
    for _ in range(count):
        run_id = new_run_id()
        assert await repo.create(NewRun(run_id, session, TurnRequest("hi"), tenant=tenant))
        ids.append(run_id)
    return ids


async def turn_order(redis: Any, keys: Keys) -> list[str]:
    """Shard 0's queued runs in the order workers take them."""
    return [m.decode() for m in await redis.zrange(keys.turn_order_at(0), 0, -1)]
