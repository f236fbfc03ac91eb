"""What ``redis_min_replicas = 1`` costs: run creation followed by ``WAIT 1`` against a primary
with one replica (both the bundled ``redis-server`` on loopback), beside the same without.

Two levels, each with ``redis_min_replicas`` 0 and 1 in turn (alternating rounds):

* script: ``RunRepository.create`` from this process, ``--runs`` sequential calls (latency
  p50/p99) and the same number with 32 in flight (creates/s);
* API: ``POST /v1/runs`` against an API process, sequential (latency p50/p99) and 32 concurrent
  clients (runs/s). No worker runs: the runs stay queued, which costs nothing here.

    python -m bench.wait_cost [--runs 1000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from typing import Any

import redis
import redis.asyncio as aioredis

from bench.lib import deploy, report, traffic
from hermes_queue.config import Settings
from hermes_queue.redisio.embedded import EmbeddedRedis
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest

CONCURRENCY = 32


def replicated_pair() -> tuple[EmbeddedRedis, EmbeddedRedis]:
    primary, replica = EmbeddedRedis.start(), EmbeddedRedis.start()
    with redis.Redis(port=replica.port) as client:
        client.replicaof("127.0.0.1", primary.port)
    deadline = time.monotonic() + 20
    with redis.Redis(port=primary.port) as client:
        while int(client.info("replication")["connected_slaves"]) < 1:
            if time.monotonic() > deadline:
                raise RuntimeError("the replica never connected")
            time.sleep(0.05)
    return primary, replica


async def script_level(url: str, replicas: int, runs: int) -> dict[str, Any]:
    client = aioredis.Redis.from_url(url)
    settings = Settings.of(
        redis_url=url, namespace=f"wait-{uuid.uuid4().hex[:8]}", redis_min_replicas=replicas
    )
    repo = RunRepository(client, settings.redis.keys, settings.runs)

    async def create() -> float:
        started = time.perf_counter()
        await repo.create(NewRun(new_run_id(), "s", TurnRequest("hi")))
        return time.perf_counter() - started

    try:
        for _ in range(50):  # warm-up: scripts loaded, connections open
            await create()
        sequential = [await create() for _ in range(runs)]
        slots = asyncio.Semaphore(CONCURRENCY)

        async def bounded() -> float:
            async with slots:
                return await create()

        started = time.perf_counter()
        await asyncio.gather(*(bounded() for _ in range(runs)))
        rate = runs / (time.perf_counter() - started)
    finally:
        await repo.aclose()
        await client.aclose()
    return {"sequential_ms": report.summary_ms(sequential), "concurrent_per_s": round(rate)}


async def api_level(url: str, replicas: int, runs: int) -> dict[str, Any]:
    os.environ[deploy.BENCH_REDIS_VAR] = url
    with deploy.Deployment(f"wait{replicas}", {"redis_min_replicas": replicas}) as dep:
        base = await dep.start_api()
        async with traffic.client_session(limit=CONCURRENCY * 2) as session:

            async def post() -> float:
                started = time.perf_counter()
                await traffic.post_run(session, base, "hi")
                return time.perf_counter() - started

            for _ in range(50):
                await post()
            sequential = [await post() for _ in range(runs)]
            slots = asyncio.Semaphore(CONCURRENCY)

            async def bounded() -> float:
                async with slots:
                    return await post()

            started = time.perf_counter()
            await asyncio.gather(*(bounded() for _ in range(runs)))
            rate = runs / (time.perf_counter() - started)
    return {"sequential_ms": report.summary_ms(sequential), "concurrent_per_s": round(rate)}


async def main(args: argparse.Namespace) -> None:
    primary, replica = replicated_pair()
    url = f"redis://127.0.0.1:{primary.port}/0"
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        for _round in range(args.rounds):
            for replicas in (0, 1):
                for level, measure in (("script", script_level), ("api", api_level)):
                    outcome = await measure(url, replicas, args.runs)
                    results.setdefault(f"{level} min_replicas={replicas}", []).append(outcome)
                    print(level, replicas, outcome, flush=True)
    finally:
        replica.stop()
        primary.stop()
    rows = []
    for name, outcomes in results.items():
        for outcome in outcomes:
            seq = outcome["sequential_ms"]
            rows.append([name, seq["p50"], seq["p99"], outcome["concurrent_per_s"]])
    report.print_table(
        f"run creation with and without WAIT 1 ({args.runs} runs per figure; one replica on "
        "loopback)",
        ["level", "sequential p50 ms", "sequential p99 ms", f"{CONCURRENCY} in flight: runs/s"],
        rows,
    )
    report.emit_json("wait_cost", {"runs": args.runs, "results": results})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    asyncio.run(main(parser.parse_args()))
