"""The noisy neighbour (issue 34): tenant A floods the queue, tenant B asks for a few turns.

One API process and W workers (16 slots each), the echo backend with turns of about one second
(``[slow:0.02]``: 51 tokens 20 ms apart). A posts ``--flood`` runs as fast as it can; right after,
B posts ``--probes`` single runs, then ``--backlog`` more. Figures per configuration:

- **B's first event**: POST sent → the first entry of the run's stream (``run.started``, written
  by the worker that claimed it), read from Redis, per probe run.
- **B's share**: of the runs started while both tenants had runs queued, the fraction that were
  B's (its fair share with equal weights: one half).

``--mode one-tenant`` sends B's runs with A's key (what every deployment was before tenants: one
FIFO queue), ``two-tenants`` with B's own key. Each mode runs in a fresh deployment.

    python -m bench.fairness [--workers 1,2] [--flood 200] [--probes 5] [--backlog 100]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable
from typing import Any, cast

import aiohttp
import redis.asyncio as aioredis

from bench.lib import deploy, report

KEY_A = "bench-tenant-a-7d41c09e2b5f8a63"
KEY_B = "bench-tenant-b-3e95f17a0c6d4b28"
TURN = "a one second turn [slow:0.02]"
MODES = ("one-tenant", "two-tenants")


async def post(session: aiohttp.ClientSession, base: str, key: str) -> tuple[str, float]:
    """A run posted with ``key``: its id and when the POST was sent (epoch seconds)."""
    sent = time.time()
    headers = {"Authorization": f"Bearer {key}"}
    async with session.post(f"{base}/v1/runs", json={"input": TURN}, headers=headers) as r:
        body = await r.json()
        if r.status != 202:
            raise RuntimeError(f"POST /v1/runs answered {r.status}: {body}")
    return body["run_id"], sent


async def posts(
    session: aiohttp.ClientSession, base: str, key: str, count: int
) -> list[tuple[str, float]]:
    return list(await asyncio.gather(*(post(session, base, key) for _ in range(count))))


async def first_event_at(redis: aioredis.Redis, stream: str, within: float) -> float:
    """When the run's first stream entry was written (its ``ts``), waiting for it."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        first = await redis.xrange(stream, count=1)
        if first:
            return float(first[0][1][b"ts"])
        await asyncio.sleep(0.01)
    raise RuntimeError(f"no event on {stream} within {within} s")


async def started_at(redis: aioredis.Redis, dep: deploy.Deployment, run_id: str) -> float:
    """When a worker took the run (waiting until one did)."""
    while True:
        # redis-py types asyncio commands as "awaitable or value"; this is an awaitable.
        raw = await cast("Awaitable[bytes | None]", redis.hget(dep.keys.run(run_id), "started_at"))
        if raw:
            return float(raw)
        await asyncio.sleep(0.05)


async def turn_length(redis: aioredis.Redis, dep: deploy.Deployment, run_id: str) -> float:
    """How long the run's turn took on its worker: its first stream entry to its last."""
    stream = dep.keys.events(run_id)
    while True:
        last = await redis.xrevrange(stream, count=1)
        if last and last[0][1][b"t"] in (b"run.completed", b"run.failed", b"run.cancelled"):
            break
        await asyncio.sleep(0.05)
    first = await redis.xrange(stream, count=1)
    return float(last[0][1][b"ts"]) - float(first[0][1][b"ts"])


def share_of_b(a_starts: list[float], b_starts: list[float]) -> float:
    """B's fraction of the runs started while both had runs queued: from B's first start to
    the earlier of the two tenants' last starts."""
    since, until = min(b_starts), min(max(a_starts), max(b_starts))
    a = sum(1 for t in a_starts if since <= t <= until)
    b = sum(1 for t in b_starts if since <= t <= until)
    return b / (a + b) if a + b else 0.0


async def one_configuration(args: argparse.Namespace, mode: str, workers: int) -> dict[str, Any]:
    overrides = {"api_keys": f"a={KEY_A},b={KEY_B}", "worker_concurrency": 16}
    key_b = KEY_A if mode == "one-tenant" else KEY_B
    with deploy.Deployment(f"fair-{mode}", overrides) as dep:
        base = await dep.start_api()
        await dep.start_workers(workers)
        redis = aioredis.Redis.from_url(dep.settings.redis.url)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32)) as session:
            warm = [await post(session, base, key) for key in (KEY_A, KEY_B)]
            for run_id, _ in warm:
                await first_event_at(redis, dep.keys.events(run_id), 30)
            flood = await posts(session, base, KEY_A, args.flood)
            probes = await posts(session, base, key_b, args.probes)
            backlog = await posts(session, base, key_b, args.backlog)
            waits = [
                await first_event_at(redis, dep.keys.events(run_id), 300) - sent
                for run_id, sent in probes
            ]
            a_starts = [await started_at(redis, dep, run_id) for run_id, _ in flood]
            b_starts = [await started_at(redis, dep, run_id) for run_id, _ in [*probes, *backlog]]
            turns = [await turn_length(redis, dep, run_id) for run_id, _ in flood[:20]]
        await redis.aclose()
    return {
        "mode": mode,
        "workers": workers,
        "b_first_event_ms": report.summary_ms(waits),
        "b_share": round(share_of_b(a_starts, b_starts), 3),
        "turn_ms": report.summary_ms(turns),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--flood", type=int, default=200)
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument("--backlog", type=int, default=100)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    args.worker_counts = [int(w) for w in args.workers.split(",")]
    args.mode_list = [m for m in args.modes.split(",") if m]
    if not set(args.mode_list) <= set(MODES):
        parser.error(f"--modes: a comma-separated subset of {','.join(MODES)}")
    return args


async def main() -> None:
    args = parse_args()
    results = [
        await one_configuration(args, mode, workers)
        for workers in args.worker_counts
        for mode in args.mode_list
    ]
    report.print_table(
        f"noisy neighbour: A floods {args.flood} one-second turns, then B posts {args.probes}"
        f" (+{args.backlog})",
        [
            "workers",
            "mode",
            "B first event p50 ms",
            "max ms",
            "B share while both queued",
            "turn p50 ms",
        ],
        [
            [
                r["workers"],
                r["mode"],
                r["b_first_event_ms"]["p50"],
                r["b_first_event_ms"]["max"],
                r["b_share"],
                r["turn_ms"]["p50"],
            ]
            for r in results
        ],
    )
    report.emit_json("fairness", {"args": vars(args), "results": results})


if __name__ == "__main__":
    asyncio.run(main())
