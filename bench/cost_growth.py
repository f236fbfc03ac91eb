"""Cost growth: pickup latency, event latency and memory with k = 1, 10, 100, 1,000 runs in flight.

Per k, a fresh Redis, API, worker and namespace (so each k's memory figures start from the same
heap); the worker has ``k + 8`` slots, so every background run holds one and the probes never
queue behind them. After a warm-up (3 probe runs) the baseline memory is read. Then:

- **Load.** ``k`` background runs are posted (``[slow:D]`` echo runs: one delta every
  ``--bg-delay`` s, long enough to outlast the level), each followed by one SSE client, from a
  separate process (``lib/inflight.py``) so the probe client's event loop is its own. The level
  waits (bounded) until the leases set holds k runs: all k are running, none queued. At the default
  1 s per token, k runs stream k deltas/s: the 1,000-run level is also a 1,000 events/s level.
- **Probes.** ``--probes`` runs of 20 words (21 deltas at the worker's ``--delay`` per token) are
  posted one at a time, each read to ``: stream closed`` by this process, a random 20–80 ms pause
  between them. Pickup = the run record's ``started_at − created_at`` (as pickup_latency.py).
  Event latency = receive time − the delta payload's ``timestamp`` (as event_latency.py). Also
  POST sent → first delta received.
- **Memory and CPU.** After the probes: API RSS, worker RSS, Redis ``used_memory``, and the
  growth over the baseline per in-flight run; the processes' CPU (% of one core) over the
  probe window. The leases set is read again to check that all k runs were still in flight.

    python -m bench.cost_growth [--quick] [--levels 1,10,100,1000] [--probes 40]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import time
from typing import Any, cast

import psutil

from bench.lib import deploy, report, traffic
from bench.lib.inflight import InflightLoad
from tests.support.polling import NeverHeld, eventually

PROBE_WORDS = 20
PROBE_SLOTS = 8


async def probe_runs(dep: deploy.Deployment, base: str, count: int) -> dict[str, list[float]]:
    """``count`` sequential probe runs: pickup, event latency per delta, POST → first delta (s)."""
    pickup: list[float] = []
    latency: list[float] = []
    first_delta: list[float] = []
    text = traffic.words(PROBE_WORDS)
    async with traffic.client_session(limit=4, timeout=60) as session:
        for _ in range(count):
            firsts: list[float] = []

            def on_event(payload: dict[str, Any], now: float, firsts: list[float] = firsts) -> None:
                if payload.get("event") == "message.delta":
                    latency.append(now - payload["timestamp"])
                    if not firsts:
                        firsts.append(now)

            sent = time.time()
            run_id = await traffic.post_run(session, base, text)
            _events, closed = await traffic.read_events(session, base, run_id, on_event)
            if not closed:
                raise RuntimeError(f"probe run {run_id} did not close cleanly")
            fields = ["created_at", "started_at"]
            created, started = cast(list[bytes], dep.redis.hmget(dep.keys.run(run_id), fields))
            pickup.append(float(started) - float(created))
            first_delta.append(firsts[0] - sent)
            await asyncio.sleep(random.uniform(0.02, 0.08))
    return {"pickup": pickup, "event": latency, "first_delta": first_delta}


def leases(dep: deploy.Deployment) -> int:
    """Runs holding a lease (claimed and not finished): the runs in flight."""
    return int(cast(int, dep.redis.zcard(dep.keys.leases)))


def memory(dep: deploy.Deployment, api: psutil.Process, worker: psutil.Process) -> dict[str, float]:
    return {
        "api_rss_mib": report.rss_mib(api),
        "worker_rss_mib": report.rss_mib(worker),
        "redis_used_mib": dep.redis_used_memory_mib(),
    }


async def probe_window(
    dep: deploy.Deployment, base: str, roles: dict[str, psutil.Process], count: int
) -> tuple[dict[str, list[float]], float, dict[str, float]]:
    """``count`` probe runs: their samples, the window's length and each role's CPU % over it."""
    cpu_before = {name: report.cpu_s(p) for name, p in roles.items()}
    t0 = time.monotonic()
    probes = await asyncio.wait_for(probe_runs(dep, base, count), 120 + count)
    window = time.monotonic() - t0
    cpu = {
        name: round((report.cpu_s(p) - cpu_before[name]) * 100 / window, 1)
        for name, p in roles.items()
    }
    return probes, window, cpu


async def one_level(k: int, args: argparse.Namespace) -> dict[str, Any]:
    overrides = {
        "worker_concurrency": k + PROBE_SLOTS,
        "drain_seconds": 1.0,  # tear-down: do not wait for k long runs
        "drain_grace_seconds": 0.0,
    }
    with deploy.Deployment("growth", overrides) as dep:
        base = await dep.start_api()
        [worker_popen] = await dep.start_workers(1, echo_token_delay=args.delay)
        api, worker = dep.api_procs[0], psutil.Process(worker_popen.pid)
        roles = {"api": api, "worker": worker}
        if dep.redis_server is not None:
            roles["redis"] = psutil.Process(dep.redis_server.process.pid)
        await probe_runs(dep, base, 3)  # warm-up: connections, scripts, imports
        await asyncio.sleep(1.0)
        baseline = memory(dep, api, worker)

        words = math.ceil(args.hold / args.bg_delay) + 1
        load = InflightLoad(base, k, f"[slow:{args.bg_delay:g}] " + traffic.words(words))
        try:
            ramp_started = time.monotonic()
            ready = await load.start(limit_s=120 + k * 0.1)
            with contextlib.suppress(NeverHeld):  # in_flight says how far the ramp got
                await eventually(lambda: leases(dep) >= k, within=60 + k * 0.05, every=0.1)
            in_flight = leases(dep)
            ramp_s = time.monotonic() - ramp_started
            await asyncio.sleep(args.settle)

            probes, window, cpu = await probe_window(dep, base, roles, args.probes)
            in_flight_end = leases(dep)
            loaded = memory(dep, api, worker)
        finally:
            background = await load.stop()

    return {
        "k": k,
        "in_flight": in_flight,
        "in_flight_end": in_flight_end,  # background runs still running after the probes
        "ramp_s": round(ramp_s, 2),
        "background": {**ready, **background},
        "pickup_ms": report.summary_ms(probes["pickup"]),
        "event_latency_ms": report.summary_ms(probes["event"]),
        "post_to_first_delta_ms": report.summary_ms(probes["first_delta"]),
        "baseline": baseline,
        "loaded": loaded,
        "growth_kib_per_run": {
            key: round((loaded[key] - baseline[key]) * 1024 / k, 1) for key in baseline
        },
        "cpu_percent": cpu,
        "probe_window_s": round(window, 2),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--levels", default="1,10,100,1000", help="k: runs in flight")
    parser.add_argument("--probes", type=int, default=40, help="probe runs per level")
    parser.add_argument("--delay", type=float, default=0.02, help="probe seconds per token")
    parser.add_argument("--bg-delay", type=float, default=1.0, help="background s per token")
    parser.add_argument("--hold", type=float, default=300.0, help="background run length, s")
    parser.add_argument("--settle", type=float, default=2.0)
    args = parser.parse_args()
    args.level_list = [int(k) for k in args.levels.split(",")]
    if args.quick:
        args.level_list, args.probes = [1, 10, 100], 15
    return args


async def run_levels(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every k, a fresh deployment each: its figures."""
    results = []
    for k in args.level_list:
        r = await one_level(k, args)
        results.append(r)
        print(
            f"k={k}: in flight {r['in_flight']}→{r['in_flight_end']}, pickup p50 "
            f"{r['pickup_ms']['p50']} ms, event p50 {r['event_latency_ms']['p50']} ms, "
            f"API {r['loaded']['api_rss_mib']} MiB, worker {r['loaded']['worker_rss_mib']} MiB, "
            f"Redis {r['loaded']['redis_used_mib']} MiB",
            flush=True,
        )
    return results


COLUMNS = [
    "k",
    "in flight",
    "bg ev/s",
    "pickup p50/p99 ms",
    "event p50/p99/max ms",
    "POST→1st delta p50",
    "API RSS MiB",
    "worker RSS MiB",
    "Redis used MiB",
    "KiB/run API·worker·Redis",
    "CPU % API·worker·Redis",
]


def row(r: dict[str, Any]) -> list[Any]:
    return [
        r["k"],
        f"{r['in_flight']}→{r['in_flight_end']}",
        r["background"].get("frames_per_s", "?"),
        f"{r['pickup_ms']['p50']}/{r['pickup_ms']['p99']}",
        "/".join(str(r["event_latency_ms"][q]) for q in ("p50", "p99", "max")),
        r["post_to_first_delta_ms"]["p50"],
        f"{r['baseline']['api_rss_mib']}→{r['loaded']['api_rss_mib']}",
        f"{r['baseline']['worker_rss_mib']}→{r['loaded']['worker_rss_mib']}",
        f"{r['baseline']['redis_used_mib']}→{r['loaded']['redis_used_mib']}",
        " · ".join(str(v) for v in r["growth_kib_per_run"].values()),
        " · ".join(str(v) for v in r["cpu_percent"].values()),
    ]


async def main() -> None:
    args = parse_args()
    traffic.raise_nofile(max(args.level_list) * 4 + 1024)
    results = await run_levels(args)
    report.print_table(
        f"cost growth: probes ({args.probes} × {PROBE_WORDS + 1} deltas at "
        f"{args.delay * 1000:g} ms/token) while k runs are in flight "
        f"(1 delta / {args.bg_delay:g} s each, one SSE client each)",
        COLUMNS,
        [row(r) for r in results],
    )
    report.emit_json(
        "cost_growth",
        {
            "probes": args.probes,
            "delay": args.delay,
            "bg_delay": args.bg_delay,
            "levels": results,
            "machine": report.machine_facts(),
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
