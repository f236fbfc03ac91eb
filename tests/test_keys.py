from __future__ import annotations

from hermes_queue.keys import Keys


def test_every_key_is_namespaced() -> None:
    keys = Keys("ns1")
    names = [
        keys.run("r"),
        keys.events("r"),
        keys.queue,
        keys.leases,
        keys.wake_channel,
        keys.control_channel,
        keys.workers,
        keys.worker("w"),
        keys.catalog,
        keys.health_check,
    ]
    assert all(name.startswith("ns1:") for name in names)
    assert len(set(names)) == len(names)


def test_one_runs_keys_share_a_cluster_hash_tag() -> None:
    keys = Keys("ns1")
    assert "{run_1}" in keys.run("run_1") and "{run_1}" in keys.events("run_1")
    assert keys.run("run_1") != keys.run("run_2")
