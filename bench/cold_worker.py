"""The first turn on a fresh worker against a warm turn: time to first token (TTFT).

Per round: a fresh ``hermes`` worker process is started beside the API (``Deployment`` waits until
it listens for wake-ups, which a worker does only once its warm-up is over), then one client
runs session chat stream turns one at a time (``traffic.stream_turn``: a new session each, fake
LLM at ``--token-delay``): the first is the cold turn, the next ``--warm-turns`` the warm ones.
The worker is then stopped. Target (docs/targets.md): the cold turn's TTFT ≤ 2 × the warm p50.
Also printed: how long the worker took from spawn to listening (its start-up and warm-up).

    python -m bench.cold_worker [--rounds 5] [--warm-turns 10] [--token-delay 0.01]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from bench.lib import deploy, report, traffic
from bench.lib.sides import queue_deployment, start_fake_llm


async def one_round(dep: deploy.Deployment, base: str, warm_turns: int) -> dict[str, Any]:
    sessions = await traffic.create_sessions(base, warm_turns + 1)
    spawned = time.perf_counter()
    [proc] = await dep.start_workers(1)
    started_s = time.perf_counter() - spawned - 0.3  # start_workers settles 0.3 s
    ttfts = []
    try:
        async with traffic.client_session(limit=4, timeout=120) as session:
            for session_id in sessions:
                ttft, _total = await traffic.stream_turn(session, base, session_id, 1)
                ttfts.append(ttft * 1000)
    finally:
        dep.stop_workers([proc])
    warm = statistics.median(ttfts[1:])
    return {
        "cold_ttft_ms": round(ttfts[0], 1),
        "warm_ttft_p50_ms": round(warm, 1),
        "ratio": round(ttfts[0] / warm, 2),
        "worker_ready_s": round(started_s, 2),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warm-turns", type=int, default=10)
    parser.add_argument("--token-delay", type=float, default=0.01)
    args = parser.parse_args()
    llm = start_fake_llm(args.token_delay)
    results = []
    try:
        with queue_deployment("cold", llm.base_url, 16) as dep:
            base = await dep.start_api()
            for index in range(args.rounds):
                r = await one_round(dep, base, args.warm_turns)
                r["round"] = index + 1
                results.append(r)
                print(f"round {index + 1}: {r}", flush=True)
    finally:
        llm.stop()
    summary = {
        key: round(statistics.median(r[key] for r in results), 2)
        for key in ("cold_ttft_ms", "warm_ttft_p50_ms", "ratio", "worker_ready_s")
    }
    report.print_table(
        f"first turn on a fresh hermes worker vs warm turns (medians of {args.rounds} rounds; "
        "target ratio ≤ 2)",
        list(summary),
        [list(summary.values())],
    )
    report.emit_json("cold_worker", {"summary": summary, "rounds": results})


if __name__ == "__main__":
    asyncio.run(main())
