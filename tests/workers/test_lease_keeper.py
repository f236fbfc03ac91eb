"""The lease keeper (``workers/lease_keeper.py``) on one Redis: a run's lease is renewed by its
thread while the event loop is blocked, from an idle keeper that held no connection of its own;
it lets go of its connection once it has had nothing to renew for a while."""

from __future__ import annotations

import pytest
import redis

from hermes_queue.config import Settings
from hermes_queue.workers import lease_keeper
from tests.support.blocked_loop import LINGER, check_leases_renewed_while_blocked


@pytest.mark.timeout(60)
async def test_leases_are_renewed_while_the_loop_is_blocked_from_an_idle_keeper(
    settings: Settings, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease_keeper, "LINGER_SECONDS", LINGER)
    admin = redis.Redis.from_url(redis_url)
    try:
        await check_leases_renewed_while_blocked(
            settings, admin, [lambda: redis.Redis.from_url(redis_url)]
        )
    finally:
        admin.close()
