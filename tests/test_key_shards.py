"""Key sharding (keys.py, issue 25): one shard and today's names without a cluster; on a
cluster every key a run script names sits in one slot, shards spread evenly over the slots,
and a session's run ids are drawn into the session's shard."""

from __future__ import annotations

import uuid

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.runs.placement import RunPlacement, new_run_id
from hermes_queue.runs.scripts import load_script

SHARDS = 16


def slot(key: str) -> int:
    return int(key_slot(key.encode()))


def test_without_a_cluster_the_names_are_todays() -> None:
    keys = Keys("hq")
    assert list(keys.shard_ids) == [0] and keys.shard_of("run_x") == 0
    assert keys.run("r") == "hq:run:{r}" and keys.events("r") == "hq:run:{r}:events"
    assert keys.steps("r") == "hq:run:{r}:steps" and keys.readers("r") == "hq:run:{r}:readers"
    assert (keys.queue, keys.leases, keys.blocked) == ("hq:queue", "hq:leases", "hq:blocked")
    assert keys.queue_of("r") == keys.queue_at(0) == "hq:queue"
    assert keys.stats(5) == keys.stats_of("r", 5) == "hq:stats:5"
    assert keys.session_active("s") == "hq:session:{s}:active"
    assert keys.session_pending("s") == "hq:session:{s}:pending"
    assert (keys.wake_channel, keys.control_channel) == ("hq:wake", "hq:control")
    assert (keys.workers, keys.worker("w")) == ("hq:workers", "hq:worker:w")
    assert keys.wake_channel_of("r") == "hq:wake" and keys.control_channel_of("r") == "hq:control"
    assert Settings.of(redis_url="redis://127.0.0.1:6379/0").redis.keys == keys
    assert "'PUBLISH'" in load_script("append") and "SPUBLISH" not in load_script("append")


def test_a_cluster_url_shards_the_keys() -> None:
    settings = Settings.of(redis_url="redis+cluster://127.0.0.1:7000,127.0.0.1:7001")
    keys = settings.redis.keys
    assert keys.cluster and list(keys.shard_ids) == list(range(SHARDS))
    sharded = load_script("create", sharded=True)
    assert "SPUBLISH" in sharded and "'PUBLISH'" not in sharded


def test_shards_spread_evenly_over_the_slot_space() -> None:
    keys = Keys("hq", shards=SHARDS, cluster=True)
    share = REDIS_CLUSTER_HASH_SLOTS // SHARDS
    assert [keys.shard_slot(s) // share for s in keys.shard_ids] == list(range(SHARDS))
    # Three primaries splitting the slots evenly (redis-cli --cluster create) get 5-6 each.
    thirds = [keys.shard_slot(s) * 3 // REDIS_CLUSTER_HASH_SLOTS for s in keys.shard_ids]
    assert sorted(thirds.count(n) for n in range(3)) == [5, 5, 6]


def test_every_key_a_run_script_names_is_in_the_runs_slot() -> None:
    keys = Keys("hq", shards=SHARDS, cluster=True)
    seen = set()
    for _ in range(200):
        run_id = new_run_id()
        names = [
            keys.run(run_id),
            keys.events(run_id),
            keys.steps(run_id),
            keys.readers(run_id),
            keys.queue_of(run_id),
            keys.leases_of(run_id),
            keys.blocked_of(run_id),
            keys.stats_of(run_id, 29_000_000),
            keys.wake_channel_of(run_id),  # sharded channels: checked against the slot too
            keys.control_channel_of(run_id),
        ]
        assert len({slot(name) for name in names}) == 1, names
        assert all(name.startswith("hq:") for name in names)
        seen.add(keys.shard_of(run_id))
    assert seen == set(range(SHARDS))


def test_a_workers_heartbeat_keys_share_the_registrys_slot() -> None:
    """One node, one round trip for a heartbeat (``ZADD`` workers, ``HSET`` + ``EXPIRE`` its
    hash), and the registry read from one node."""
    keys = Keys("hq", shards=SHARDS, cluster=True)
    assert keys.workers == "hq:workers"  # unchanged: the reapers' live count reads it
    ids = [f"host:{pid}:abc{pid}" for pid in range(50)] + ["h:{odd}:1"]
    assert {slot(keys.worker(w)) for w in ids} == {slot(keys.workers)}
    assert len({keys.worker(w) for w in ids}) == len(ids)


def test_per_shard_scripts_name_one_slot() -> None:
    """The reaper's and the abandoned-run scan's keys: one shard's own."""
    keys = Keys("hq", shards=SHARDS, cluster=True)
    for shard in keys.shard_ids:
        names = [keys.queue_at(shard), keys.leases_at(shard), keys.blocked_at(shard)]
        assert {slot(name) for name in names} == {keys.shard_slot(shard)}


def test_session_run_ids_are_drawn_into_the_sessions_shard() -> None:
    keys = Keys("hq", shards=SHARDS, cluster=True)
    placement = RunPlacement(keys, redis=None)  # type: ignore[arg-type]  # no tick pinned
    for _ in range(50):
        session_id = uuid.uuid4().hex
        run_id = placement.new_run_id(session_id)
        assert placement.fits(run_id, session_id)
        names = [
            keys.session_active(session_id),
            keys.session_pending(session_id),
            keys.run(run_id),
            keys.queue_of(run_id),
            keys.blocked_of(run_id),
            keys.readers(run_id),
        ]
        assert len({slot(name) for name in names}) == 1, names
    plain = RunPlacement(Keys("hq"), redis=None)  # type: ignore[arg-type]
    assert plain.fits(new_run_id(), "any")


def test_shard_names_need_a_cluster() -> None:
    keys = Keys("hq", shards=SHARDS, cluster=True)
    for name in ("queue", "leases", "blocked", "wake_channel", "control_channel"):
        try:
            getattr(keys, name)
        except ValueError:
            continue
        raise AssertionError(f"keys.{name} named one key on a cluster")
