"""What an idle fleet costs Redis, against worker processes and primaries (issue 35).

For each Redis (one plain server; a loopback Redis Cluster of 3 primaries, ``lib/redis_nodes``)
it starts one API process and then 1, 4 (and, with ``--workers 1,4,16``, 16) idle echo worker
processes, lets them settle, and measures over ``--window`` seconds:

* commands/s: the delta of ``INFO commandstats`` calls summed over every primary (commands run
  inside scripts count, as Redis counts them), minus this benchmark's own ``INFO`` calls;
* connections: ``CLIENT LIST`` on every primary, less this benchmark's own connection.

"Per idle worker" is the slope between the smallest and the largest worker count, so the API
process and the benchmark drop out. Then, on the cluster with two workers, the reaper's
takeover: the holder of some shards' reaper leases (``keys.reaper_lease_at``) is SIGKILLed and
the time until another live process holds each of them is measured.

Run: ``python -m bench.fleet`` (``--workers 1,4``, ``--primaries 1,3``, ``--window 10``).
Prints a JSON report; ~1 min per worker count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from typing import Any

import redis

from bench.lib import redis_nodes
from bench.lib.redis_nodes import Node
from hermes_queue.config import Settings
from hermes_queue.runs.shard_leases import LEASE_PASSES
from tests.support.processes import Cluster, Proc

API_KEY = "bench-key-5c1e9a7f3d2b80649e17"
# Idle this long before each measurement: past a worker's first trim of its cluster client's
# surplus connections (redisio.cluster.TRIM_SECONDS), as a fleet left idle is.
SETTLE_SECONDS = 35.0


def calls(node: Node) -> int:
    """Commands the node ran so far (every command's ``calls``), less this read's own INFO."""
    stats = node.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if not k.startswith("cmdstat_info"))


def connections(node: Node) -> int:
    """Clients connected to the node, less the one asking."""
    with node.client() as client:
        return len(client.client_list()) - 1


async def measure(nodes: list[Node], window: float) -> dict[str, Any]:
    before = [calls(node) for node in nodes]
    start = time.monotonic()
    await asyncio.sleep(window)
    after = [calls(node) for node in nodes]
    elapsed = time.monotonic() - start
    per_node = [round((a - b) / elapsed, 1) for a, b in zip(after, before, strict=True)]
    conns = [connections(node) for node in nodes]
    return {
        "commands_per_s": round(sum(per_node), 1),
        "commands_per_s_per_node": per_node,
        "connections": sum(conns),
        "connections_per_node": conns,
    }


def url_of(nodes: list[Node]) -> str:
    if len(nodes) == 1 and not nodes[0].cluster:
        return f"redis://{nodes[0].address}/0"
    return "redis+cluster://" + ",".join(node.address for node in nodes)


async def start_workers(cluster: Cluster, count: int) -> list[Proc]:
    """``count`` workers, four at a time (a shared machine starts them without timing out)."""
    started: list[Proc] = []
    while len(started) < count:
        batch = min(4, count - len(started))
        started += await asyncio.gather(*(cluster.start_worker() for _ in range(batch)))
    return started


async def reaper_takeover(cluster: Cluster, nodes: list[Node], workers: list[Proc]) -> Any:
    """SIGKILL the worker holding the most reaper leases; seconds until every lease it held is
    held by another process (None: no worker held one)."""
    keys = cluster.settings.redis.keys
    rc = redis.RedisCluster(host=nodes[0].host, port=nodes[0].port)
    try:

        def holders() -> dict[int, str]:
            found = {}
            for shard in keys.shard_ids:
                value = rc.get(keys.reaper_lease_at(shard))
                if value is not None:
                    found[shard] = value.decode()
            return found

        held = holders()
        by_pid: dict[int, list[int]] = {}
        for shard, holder in held.items():
            by_pid.setdefault(int(holder.split(":")[1]), []).append(shard)
        victim = next((w for w in workers if w.process.pid in by_pid), None)
        if victim is None:
            return None
        shards = by_pid[victim.process.pid]
        lost = {s: held[s] for s in shards}
        victim.kill()
        killed = time.monotonic()
        taken: dict[int, float] = {}
        while len(taken) < len(shards) and time.monotonic() - killed < 60:
            now = holders()
            for shard in shards:
                if shard not in taken and now.get(shard) not in (None, lost[shard]):
                    taken[shard] = round(time.monotonic() - killed, 2)
            await asyncio.sleep(0.05)
        return {
            "shards_held": len(shards),
            "max_takeover_s": max(taken.values(), default=None),
            "all_taken": len(taken) == len(shards),
            "lease_s": LEASE_PASSES * cluster.settings.runs.reaper_interval_seconds,
        }
    finally:
        rc.close()


async def one_redis(primaries: int, counts: list[int], window: float) -> dict[str, Any]:
    with redis_nodes.started(primaries) as nodes:
        settings = Settings.of(
            redis_url=url_of(nodes),
            namespace=f"fleet-{uuid.uuid4().hex[:8]}",
            api_key=API_KEY,
            log_level="INFO",
        ).validate()
        cluster = Cluster(settings, logdir=tempfile.mkdtemp(prefix="hq-fleet-"))
        rows: list[dict[str, Any]] = []
        try:
            await cluster.start_api()
            workers: list[Proc] = []
            for count in counts:
                workers += await start_workers(cluster, count - len(workers))
                await asyncio.sleep(SETTLE_SECONDS)
                rows.append({"workers": count, **await measure(nodes, window)})
            first, last = rows[0], rows[-1]
            span = last["workers"] - first["workers"]
            report: dict[str, Any] = {"primaries": primaries, "rows": rows}
            if span:
                report["per_idle_worker"] = {
                    "commands_per_s": round(
                        (last["commands_per_s"] - first["commands_per_s"]) / span, 1
                    ),
                    "connections": round((last["connections"] - first["connections"]) / span, 1),
                    "connections_per_node": round(
                        (last["connections"] - first["connections"]) / span / len(nodes), 1
                    ),
                }
            if (
                settings.redis.cluster
                and len(workers) >= 2
                and hasattr(settings.redis.keys, "reaper_lease_at")
            ):
                report["reaper_takeover"] = await reaper_takeover(cluster, nodes, workers)
            return report
        finally:
            cluster.stop_all(timeout=15)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,4", help="worker counts, ascending")
    parser.add_argument("--primaries", default="1,3", help="1: one plain Redis; N: a cluster")
    parser.add_argument("--window", type=float, default=10.0, help="seconds measured per row")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    reports = [await one_redis(int(p), counts, args.window) for p in args.primaries.split(",")]
    print(json.dumps(reports, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
