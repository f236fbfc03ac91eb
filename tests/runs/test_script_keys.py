"""Each run script's keys come from its own ``-- KEYS:`` header (runs/scripts.py ScriptKeys):
the header must name every key the Lua reads, by a role the keys of a run or shard answer."""

from __future__ import annotations

import re
from importlib import resources

import pytest
from redis.crc import key_slot

from hermes_queue.keys import Keys
from hermes_queue.runs.placement import RunPlacement
from hermes_queue.runs.scripts import ScriptKeys, declared_keys

LUA = resources.files("hermes_queue.runs") / "lua"
RUN_SCRIPTS = sorted(
    path.name.removesuffix(".lua")
    for path in LUA.iterdir()
    if path.name.endswith(".lua")
    and not path.name.endswith("prelude.lua")
    # One key of their own, named by the caller: an idempotency record, a tenant's rate bucket.
    and path.name not in ("idempotency_settle.lua", "rate.lua")
)
SHARD_SCRIPTS = (
    "expired",
    "abandoned",
    "release_held",
    "webhook_claim",
    "webhook_expand",
    "shard_lease",
)
# Scripts about one webhook delivery: its hash beside its shard's webhook keys.
DELIVERY_SCRIPTS = ("webhook_settle", "webhook_redeliver")


@pytest.mark.parametrize("script", RUN_SCRIPTS)
def test_a_scripts_header_declares_every_key_it_reads(script: str) -> None:
    text = (LUA / f"{script}.lua").read_text("utf-8")
    highest = max(int(n) for n in re.findall(r"KEYS\[(\d+)\]", text))
    assert len(declared_keys(script)) == highest


@pytest.mark.parametrize(
    "script", [s for s in RUN_SCRIPTS if s not in (*SHARD_SCRIPTS, *DELIVERY_SCRIPTS)]
)
def test_a_run_scripts_keys_are_the_runs_in_its_shards_slot(script: str) -> None:
    keys = Keys("hq", shards=16, cluster=True)
    # A session run is placed in its session's shard (runs/placement.py).
    run_id = RunPlacement(keys, redis=None).new_run_id("sess")  # type: ignore[arg-type]
    names = ScriptKeys(keys).of_run(script, run_id, session_id="sess")
    assert len(names) == len(declared_keys(script))
    assert names[0] == keys.run(run_id)
    tags = {re.search(r"\{(.+?)\}", name).group(1) for name in names}  # type: ignore[union-attr]
    assert len(tags) == 1


@pytest.mark.parametrize("script", SHARD_SCRIPTS)
def test_a_shard_scan_names_the_shards_own_keys(script: str) -> None:
    keys = Keys("hq", shards=16, cluster=True)
    names = ScriptKeys(keys).of_shard(script, 3)
    assert len(names) == len(declared_keys(script))
    assert {keys.shard_slot(3)} == {key_slot(name.encode()) for name in names}


@pytest.mark.parametrize("script", DELIVERY_SCRIPTS)
def test_a_delivery_scripts_keys_are_in_its_shards_slot(script: str) -> None:
    keys = Keys("hq", shards=16, cluster=True)
    names = ScriptKeys(keys).of_delivery(script, 5, "msg_0123456789_run_abc")
    assert keys.webhook_delivery_at(5, "msg_0123456789_run_abc") in names
    assert {keys.shard_slot(5)} == {key_slot(name.encode()) for name in names}


def test_a_runs_webhook_outbox_is_in_the_runs_slot() -> None:
    """The script that ends a run queues its deliveries in the outbox its record names."""
    keys = Keys("hq", shards=16, cluster=True)
    run_id = RunPlacement(keys, redis=None).new_run_id("sess")  # type: ignore[arg-type]
    assert key_slot(keys.webhook_outbox_of(run_id).encode()) == key_slot(keys.run(run_id).encode())


def test_a_session_key_without_its_session_is_refused() -> None:
    with pytest.raises(ValueError, match="session"):
        ScriptKeys(Keys("hq")).of_run("create_session_run", "run_abc")
