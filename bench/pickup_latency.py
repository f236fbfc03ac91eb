"""Job pickup latency (enqueue → a worker claims the run) on an idle system, and the Redis
commands per second an idle worker sends.

Pickup = the run record's ``started_at`` (written by ``claim.lua``, worker wall clock) minus its
``created_at`` (written by the API just before ``create.lua``): same host, same clock. Runs are
enqueued one at a time through ``POST /v1/runs``; the next is sent only after the previous one
finished and a short pause, so the worker is idle (waiting for a wake-up) each time.

Idle commands: with one worker and no API connected, the delta of Redis's INFO commandstats
(calls per command, summed) over a window, minus the INFO calls of the measurement itself.

    python -m bench.pickup_latency [--quick] [--runs 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

import redis.asyncio as aioredis

from bench.lib import deploy, report, traffic


def commandstats(dep: deploy.Deployment) -> dict[str, int]:
    raw = dep.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(stats["calls"]) for name, stats in raw.items()}


async def idle_commands(dep: deploy.Deployment, window: float) -> dict[str, Any]:
    """Commands/s of the deployment's Redis while only one idle worker is connected."""
    await asyncio.sleep(1.0)  # past startup traffic
    before = commandstats(dep)
    await asyncio.sleep(window)
    after = commandstats(dep)
    delta = {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}
    delta.pop("info", None)  # our own measurement
    total = sum(delta.values())
    return {
        "window_s": window,
        "commands": total,
        "per_s": round(total / window, 2),
        "breakdown": dict(sorted(delta.items(), key=lambda kv: -kv[1])),
    }


async def wait_terminal(redis: aioredis.Redis, key: str) -> None:
    cursor = "0-0"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        reply = await redis.xread({key: cursor}, block=5000, count=100)
        for _key, entries in reply:
            for entry_id, fields in entries:
                cursor = entry_id
                if fields[b"t"] in (b"run.completed", b"run.failed", b"run.cancelled"):
                    return
    raise RuntimeError(f"run on {key} did not finish")


async def one_round(
    dep: deploy.Deployment, base: str, runs: int
) -> tuple[list[float], list[float], list[float]]:
    """(pickup s, POST→run.started s, POST round trip s) per run."""
    redis = aioredis.Redis.from_url(dep.settings.redis.url)
    pickup, to_started, post_rtt = [], [], []
    text = traffic.words(20)
    async with traffic.client_session(limit=4) as session:
        for _ in range(runs):
            sent = time.time()
            run_id = await traffic.post_run(session, base, text)
            post_rtt.append(time.time() - sent)
            await wait_terminal(redis, dep.keys.events(run_id))
            record = await redis.hmget(dep.keys.run(run_id), "created_at", "started_at")
            created, started = (float(v) for v in record)
            pickup.append(started - created)
            first = await redis.xrange(dep.keys.events(run_id), count=1)
            to_started.append(float(first[0][1][b"ts"]) - sent)
            # Idle again before the next enqueue, at a random phase of the 0.5 s fallback poll.
            await asyncio.sleep(random.uniform(0.02, 0.08))
    await redis.aclose()
    return pickup, to_started, post_rtt


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle-window", type=float, default=10.0)
    args = parser.parse_args()
    if args.quick:
        args.runs, args.rounds, args.idle_window = 50, 1, 5.0
    return args


async def measure(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """An idle worker's Redis commands, then the rounds of sequential runs: the idle figures,
    each round's, and Redis's version."""
    with deploy.Deployment("pickup") as dep:
        await dep.start_workers(1)
        idle = await idle_commands(dep, args.idle_window)
        base = await dep.start_api()
        await one_round(dep, base, 5)  # warm-up: connections, script cache, imports
        rounds = []
        for _ in range(args.rounds):
            pickup, to_started, post_rtt = await one_round(dep, base, args.runs)
            rounds.append(
                {
                    "pickup_ms": report.summary_ms(pickup),
                    "post_to_run_started_ms": report.summary_ms(to_started),
                    "post_rtt_ms": report.summary_ms(post_rtt),
                }
            )
        return idle, rounds, dep.redis_version()


def print_rounds(args: argparse.Namespace, rounds: list[dict[str, Any]]) -> None:
    rows = []
    for index, r in enumerate(rounds, 1):
        for name in ("pickup_ms", "post_to_run_started_ms", "post_rtt_ms"):
            s = r[name]
            rows.append([index, name, s["n"], s["p50"], s["p95"], s["p99"], s["max"]])
    report.print_table(
        f"pickup latency, idle system, sequential runs ({args.runs} per round)",
        ["round", "figure", "n", "p50", "p95", "p99", "max"],
        rows,
    )


async def main() -> None:
    args = parse_args()
    idle, rounds, redis_version = await measure(args)
    print_rounds(args, rounds)
    median = {
        q: statistics.median(r["pickup_ms"][q] for r in rounds) for q in ("p50", "p95", "p99")
    }
    print(f"\nmedian over {len(rounds)} round(s), pickup ms: {median}  (target p50 ≤ 5, p99 ≤ 20)")
    print(
        f"idle worker: {idle['commands']} Redis commands in {idle['window_s']} s = "
        f"{idle['per_s']}/s (target ≤ 20/s); breakdown {idle['breakdown']}"
    )
    report.emit_json(
        "pickup_latency",
        {
            "runs_per_round": args.runs,
            "rounds": rounds,
            "pickup_ms_median_of_rounds": median,
            "idle_worker": idle,
            "redis": redis_version,
            "machine": report.machine_facts(),
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
