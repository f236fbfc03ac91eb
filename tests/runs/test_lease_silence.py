"""Lease time counts only while Redis is heard from (``runs/lua/prelude.lua``: leases_heard).

A silence on a shard's leases longer than a lease can spare (Redis restarted, failed over or
stalled: nobody could renew) moves every deadline of the shard on by the silence before the
reaper reads them; without one, a lapsed lease is a dead worker's and is reaped as always. The
silence is made here by setting when the shard was last heard from, the Redis clock's way."""

from __future__ import annotations

from typing import Any

from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.runs.leases import quiet_ms
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.scripts import ScriptKeys, load_script
from hermes_queue.runs.shard_leases import unscanned_seconds
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.streams.presence import RENEW_SECONDS
from hermes_queue.streams.presence import TTL_MS as READER_MS

# A silence a reader's entry cannot outlast (it vouches READER_MS, renewed every RENEW_SECONDS).
READER_SILENCE_MS = READER_MS - int(RENEW_SECONDS * 1000)

SILENCE_MS = 60_000


async def redis_now_ms(redis: Any) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def heard(redis: Any, keys: Keys, run_id: str, at: int, quiet: int = 0) -> None:
    """Set when the shard of ``run_id`` was last heard from, and the quiet its noter allowed."""
    await redis.hset(keys.leases_heard_of(run_id), mapping={"at": at, "quiet": quiet})


async def claimed(redis: Any, settings: Settings) -> tuple[RunRepository, str]:
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    run_id = new_run_id()
    assert await repo.create(NewRun(run_id, "s1", TurnRequest("hello")))
    assert await repo.claim(run_id, "w1") is not None
    return repo, run_id


async def test_a_lease_that_lapsed_while_redis_was_silent_moves_on_by_the_silence(
    redis: Any, keys: Keys, settings: Settings
) -> None:
    repo, run_id = await claimed(redis, settings)
    now = await redis_now_ms(redis)
    # Its last renewal landed just before Redis went silent for a minute: it lapsed meanwhile.
    await heard(redis, keys, run_id, now - SILENCE_MS)
    await redis.zadd(keys.leases, {run_id: now - SILENCE_MS + 1_000})

    assert await repo.leases.expired() == []  # the reaper's pass hears the silence first
    deadline = await redis.zscore(keys.leases, run_id)
    assert deadline is not None and now < deadline <= now + 1_000 + 1_000  # a second still
    assert await repo.leases.reap(run_id) == "alive"
    record = await repo.get(run_id)
    assert record is not None and record.status == "running" and record.attempt == 1


async def test_a_lease_that_lapsed_while_redis_was_heard_from_is_reaped(
    redis: Any, keys: Keys, settings: Settings
) -> None:
    """No silence (the claim was just heard): a lapsed lease is a dead worker's, as before."""
    repo, run_id = await claimed(redis, settings)
    await redis.zadd(keys.leases, {run_id: await redis_now_ms(redis) - 1_000})
    assert await repo.leases.expired() == [run_id]
    assert await repo.leases.reap(run_id) == "requeued"


async def test_a_silence_shorter_than_a_lease_can_spare_moves_nothing(
    redis: Any, keys: Keys, settings: Settings
) -> None:
    repo, run_id = await claimed(redis, settings)
    now = await redis_now_ms(redis)
    quiet = quiet_ms(settings.runs, keys.cluster)
    await heard(redis, keys, run_id, now - quiet // 2)  # half the quiet: slack for a slow run
    await redis.zadd(keys.leases, {run_id: now - 1_000})
    assert await repo.leases.expired() == [run_id]


async def test_a_renewal_after_a_silence_keeps_every_lease_of_the_shard(
    redis: Any, keys: Keys, settings: Settings
) -> None:
    """The first script to run after the silence moves the deadlines, whichever it is: here
    one worker's renewal, and another worker's run, not yet renewed, is kept too."""
    repo, renewed = await claimed(redis, settings)
    _, waiting = await claimed(redis, settings)
    now = await redis_now_ms(redis)
    await heard(redis, keys, renewed, now - SILENCE_MS)
    for run_id in (renewed, waiting):
        await redis.zadd(keys.leases, {run_id: now - SILENCE_MS + 2_000})
    script = redis.register_script(repo.leases.renew_script)
    run_keys, args = repo.leases.renew_args(renewed, 1)
    assert await script(keys=run_keys, args=args) == 0
    assert await repo.leases.expired() == []
    waiting_deadline = await redis.zscore(keys.leases, waiting)
    assert waiting_deadline is not None and waiting_deadline > now


async def test_a_silence_another_process_calls_its_normal_quiet_moves_nothing(
    redis: Any, keys: Keys, settings: Settings
) -> None:
    """Processes with other settings (a reaper passing every 30 s) note the quiet they allow:
    a gap that is their normal course is no outage to a caller that allows less."""
    repo, run_id = await claimed(redis, settings)
    now = await redis_now_ms(redis)
    await heard(redis, keys, run_id, now - 20_000, quiet=120_000)
    await redis.zadd(keys.leases, {run_id: now - 1_000})
    assert await repo.leases.expired() == [run_id]


async def test_a_clock_that_stepped_back_is_never_taken_for_a_silence(
    redis: Any, keys: Keys, settings: Settings
) -> None:
    """A failover to a primary whose clock is behind: the note (in its future) is taken
    afresh, and a silence after it is measured from the new note."""
    repo, run_id = await claimed(redis, settings)
    now = await redis_now_ms(redis)
    await heard(redis, keys, run_id, now + SILENCE_MS)
    await redis.zadd(keys.leases, {run_id: now - 1_000})
    assert await repo.leases.expired() == [run_id]  # no shift by a negative silence
    noted = await redis.hget(keys.leases_heard_of(run_id), "at")
    assert noted is not None and int(noted) <= await redis_now_ms(redis)


def test_the_quiet_outlasts_a_shards_normal_silences_and_catches_a_lapsing_outage(
    settings: Settings,
) -> None:
    """Longer than a shard goes unheard of in the normal course (renewals every heartbeat,
    reaper passes, on a cluster a dead reaper's takeover, which would otherwise delay its own
    runs' reaping), whatever the settings; with the defaults, short enough that an outage
    which lapses a lease before its keeper can renew it is caught."""
    for runs in (
        settings.runs,
        Settings.of().runs,
        Settings.of(reaper_interval_seconds=2.0).runs,
        Settings.of(heartbeat_seconds=2.0).runs,
    ):
        heartbeat, interval = runs.heartbeat_seconds, runs.reaper_interval_seconds
        assert quiet_ms(runs, False) / 1000 > max(heartbeat, interval)
        assert quiet_ms(runs, True) / 1000 > unscanned_seconds(interval, heartbeat)
    defaults = Settings.of().runs
    for cluster in (False, True):
        quiet = quiet_ms(defaults, cluster) / 1000
        assert quiet <= defaults.lease_seconds - 2 * defaults.heartbeat_seconds


async def test_a_reader_whose_entry_lapsed_in_a_silence_is_not_taken_for_gone(
    redis: Any, keys: Keys, settings: Settings
) -> None:
    """An active session turn with another parked behind it is stopped once nobody reads it
    (``abandoned.lua``); its reader's entry, renewed every 2 s by its API process, lapsed while
    Redis was away too: for an entry's length after the silence, nothing is judged abandoned.
    The default lease here, so the silence is shorter than a lease can spare (nothing else
    moves) and longer than an entry outlasts."""
    settings = settings.replace(lease_seconds=10.0, heartbeat_seconds=1.0)
    assert quiet_ms(settings.runs, keys.cluster) > READER_SILENCE_MS + 1_000
    active, parked, session = new_run_id(), new_run_id(), "s-silence"
    now = await redis_now_ms(redis)
    await redis.hset(
        keys.run(active),
        mapping={"run_id": active, "status": "running", "readers_key": keys.readers(active)},
    )
    await redis.zadd(keys.readers(active), {"reader-1": now - 1_000})  # lapsed
    await redis.set(keys.session_active(session), keys.run(active))
    await redis.hset(
        keys.run(parked), mapping={"status": "queued", "active_key": keys.session_active(session)}
    )
    await redis.zadd(keys.blocked, {keys.run(parked): now})
    script = redis.register_script(load_script("abandoned"))
    scan_keys = ScriptKeys(keys).of_shard("abandoned", 0)

    async def abandoned() -> list[bytes]:
        args = [10, quiet_ms(settings.runs, keys.cluster)]
        return list(await script(keys=scan_keys, args=args))

    # Shorter than a lease can spare, longer than an entry outlasts: no lease moves, and yet
    # the reader's entry lapsed in it.
    await heard(redis, keys, active, now - READER_SILENCE_MS - 1_000)
    assert await abandoned() == []  # the scan itself hears the silence: it waits
    assert await abandoned() == []  # and goes on waiting for an entry's length
    await redis.hset(keys.leases_heard_of(active), "back", now - READER_MS - 1_000)
    assert await abandoned() == [active.encode()]  # long enough: the reader is gone


async def test_a_new_turn_does_not_take_the_turn_ahead_for_abandoned_right_after_a_silence(
    redis: Any, keys: Keys, settings: Settings
) -> None:
    """Admission judges the active turn too (``create_session_run.lua``): a client sending again
    what got a 503 during the outage, or a scheduled tick that came due in it, must not have the
    turn still being read stopped before its reader's process renewed its entry."""
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    session = f"sess-{new_run_id()}"
    first, second, third = (repo.placement.new_run_id(session) for _ in range(3))
    admitted = await repo.create_session_run(
        NewRun(first, session, TurnRequest("one")), strategy="enqueue", read_by="reader-1"
    )
    assert admitted.verdict == "created"
    now = await redis_now_ms(redis)
    await redis.zadd(keys.readers(first), {"reader-1": now - 1_000})  # lapsed in the outage
    await heard(redis, keys, first, now - READER_SILENCE_MS - 1_000)
    parked = await repo.create_session_run(
        NewRun(second, session, TurnRequest("two")), strategy="enqueue"
    )
    assert (parked.verdict, parked.blocking_run_id, parked.abandoned) == ("waiting", first, False)
    # An entry's length after the silence, a lapsed entry is a reader gone, as before.
    await redis.hset(keys.leases_heard_of(first), "back", now - READER_MS - 1_000)
    later = await repo.create_session_run(
        NewRun(third, session, TurnRequest("three")), strategy="enqueue"
    )
    assert (later.blocking_run_id, later.abandoned) == (first, True)


def test_the_scripts_know_a_readers_entry_as_presence_writes_it() -> None:
    """prelude.lua keeps streams/presence.py's timings as constants of its own."""
    prelude = load_script("expired")
    assert f"local READER_MS = {READER_MS}" in prelude
    assert f"local READER_SILENCE_MS = {READER_SILENCE_MS}" in prelude
