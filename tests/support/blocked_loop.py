"""A run's lease while its worker's event loop is blocked, from idle to busy to idle again: what
the lease keeper's thread is for (``workers/lease_keeper.py``). Shared by the plain Redis test
(tests/workers/test_lease_keeper.py) and the cluster one (tests/cluster/).

An in-process worker and API on the test's own event loop; the test blocks that loop itself
(``time.sleep``), so every coroutine of the worker stands still, as behind agent code that
never yields.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from hermes_queue.config import Settings
from hermes_queue.workers.lease_keeper import LeaseKeeper
from tests.support.inprocess import running_api, running_worker
from tests.support.polling import eventually

LEASE = 1.5
HEARTBEAT = 0.25
LINGER = 1.0  # the keeper's LINGER_SECONDS in these tests


def keeper_connections(nodes: Sequence[Callable[[], redis.Redis]], worker_id: str) -> int:
    """The connections of the keeper's thread (by their client name), over ``nodes``."""
    name = f"hermes-queue:lease-keeper:{worker_id}"
    count = 0
    for node in nodes:
        with node() as client:
            count += sum(1 for c in client.client_list() if c["name"] == name)
    return count


def block_and_watch(admin: Any, settings: Settings, run_id: str, seconds: float) -> list[Any]:
    """Block the event loop for ``seconds``, reading the run's lease deadline and Redis's clock
    (ms) every 50 ms meanwhile: the samples."""
    leases = settings.redis.keys.leases_of(run_id)
    samples = []
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        secs, micros = admin.time()
        samples.append((secs * 1000 + micros // 1000, admin.zscore(leases, run_id)))
        time.sleep(0.05)  # the loop stays blocked: that is the point
    return samples


async def check_leases_renewed_while_blocked(
    settings: Settings, admin: Any, nodes: Sequence[Callable[[], redis.Redis]]
) -> None:
    """An idle worker's keeper holds no connection; a run it takes has its lease renewed by the
    thread while the loop is blocked for twice the lease, and completes in its first attempt;
    once the keeper had nothing to renew for ``LINGER`` s, it holds no connection again and
    the registry entry goes on being written (by the loop)."""
    settings = settings.replace(
        lease_seconds=LEASE, heartbeat_seconds=HEARTBEAT, echo_token_delay=0.02
    )
    keys = settings.redis.keys
    async with running_api(settings) as api, running_worker(settings) as worker:
        runtime = worker.handler.runtime  # type: ignore[union-attr]
        keeper: LeaseKeeper = runtime.keeper
        worker_id = runtime.worker_id

        def idle() -> bool:
            return not keeper.renewing and keeper_connections(nodes, worker_id) == 0

        await eventually(idle, within=10, what="an idle keeper without a connection")
        answer = await api.post("/v1/runs", json={"input": "held while the loop is blocked"})
        run_id = (await answer.json())["run_id"]
        # Tracked: the keeper was handed the run in the same step (workers/turn.py).
        await eventually(lambda: run_id in runtime.active, within=10, what="the run taken")
        samples = block_and_watch(admin, settings, run_id, 2 * LEASE)
        renewing_connections = keeper_connections(nodes, worker_id)

        lapsed = [(now, deadline) for now, deadline in samples if not deadline or deadline <= now]
        assert not lapsed, samples
        assert samples[-1][1] - samples[0][1] >= LEASE * 1000, samples  # renewed, repeatedly
        assert renewing_connections >= 1  # the thread's own, named

        async def record() -> dict[str, Any]:
            return dict(await (await api.get(f"/v1/runs/{run_id}")).json())

        done = await eventually(record, lambda r: r["status"] == "completed", within=20)
        assert admin.hget(keys.run(run_id), "attempt") == b"1", done  # never reaped

        await eventually(idle, within=LINGER + 10, what="the keeper letting go")
        seen = admin.zscore(keys.workers, worker_id)
        await eventually(
            lambda: admin.zscore(keys.workers, worker_id),
            lambda score: score is not None and score > seen,
            within=5,
            what="the registry entry written by the loop",
        )
