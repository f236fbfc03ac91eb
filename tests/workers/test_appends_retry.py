"""A turn's writes wait out a Redis outage as long as a restart or a failover takes
(``workers/appends.py``: ``OUTAGE_WAIT_SECONDS``), on a clock of the test's own: the run keeps
its lease meanwhile (tests/failover/test_long_outage.py), so giving up early would only fail a
turn its worker still holds."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from hermes_queue.workers import appends
from hermes_queue.workers.appends import OUTAGE_WAIT_SECONDS, EventPublishFailed, retrying


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    async def pause(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(appends, "_monotonic", fake.monotonic)
    monkeypatch.setattr(appends, "_pause", fake.pause)
    return fake


def redis_away_for(clock: FakeClock, seconds: float) -> Any:
    """A call refused (connection refused) until ``seconds`` of the clock passed."""
    calls: list[float] = []

    async def call() -> str:
        calls.append(clock.now)
        if clock.now < seconds:
            raise RedisConnectionError("Connection refused")
        return "written"

    call.calls = calls  # type: ignore[attr-defined]
    return call


async def test_a_write_waits_out_a_sentinel_failover(clock: FakeClock) -> None:
    """Sentinel's default down-after-milliseconds is 30 s; the election follows. The old
    budget (~8 s of retries) failed every turn that streamed through it."""
    call = redis_away_for(clock, 40.0)
    assert await retrying("append", "run_x", call) == "written"
    assert 40.0 <= clock.now <= 42.0  # tried again every 2 s once the first pauses were over
    assert len(call.calls) < 30


async def test_a_write_fails_the_turn_once_redis_stays_away_too_long(clock: FakeClock) -> None:
    call = redis_away_for(clock, OUTAGE_WAIT_SECONDS + 60)
    with pytest.raises(EventPublishFailed):
        await retrying("append", "run_x", call)
    assert clock.now <= OUTAGE_WAIT_SECONDS


async def test_an_error_reply_that_is_no_refusal_fails_at_once(clock: FakeClock) -> None:
    async def call() -> str:
        raise ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")

    with pytest.raises(ResponseError):
        await retrying("append", "run_x", call)
    assert clock.now == 0.0
