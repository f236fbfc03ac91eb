"""Machinery throughput: closed-loop clients, each doing ``POST /v1/runs`` then reading the run's
full SSE to ``: stream closed``, against one API process, 1–2 workers and Redis on this machine.

Per (token delay, concurrency) level: runs/s, time to first token (POST sent → first
``message.delta`` received), total time (POST sent → ``: stream closed``), failures (any error,
unclean close, or a stream missing a delta or ``run.completed``), Redis commands per streamed
token (INFO ``total_commands_processed`` delta / deltas received), and server CPU per run (API +
workers, from psutil). The echo input has 20 words (``--words``), so each reply is 21 tokens
(deltas that pile up behind an append in flight arrive merged: a run is checked by its text;
tokens per run are 21). ``--words 1`` (2 tokens) against the default separates what a run costs
whatever its length from what each token adds.

Responsiveness probe (``--probe-health``): while a level runs, a separate process polls
``GET /health`` and, on a thread of its own, a *new* request through the whole middleware stack
and a Redis read, ``GET /v1/runs/{id}`` of a finished run (with the bearer key); each request
on a new connection, then 100 ms of rest. Reported per level: count, p50/p99/max latency,
failures and requests over 100 ms (TARGETS: 512 streaming clients at 10 ms/token, the API
answers ``/health`` and new requests within 100 ms). By default (``auto``) only levels of 512
clients or more are probed: the probe's ~20 requests/s are noise there (~2 % of the API's
requests) but would nudge the small levels' runs/s; ``all`` probes every level, ``none`` none.

    python -m bench.throughput [--quick] [--workers 1] [--rounds 3] [--delays 0,0.01]
        [--levels 1,32] [--words 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

import psutil

from bench.lib import deploy, report, traffic
from bench.lib.closed_loop import INPUT_WORDS, level
from bench.lib.prober import Prober, ProbeResult

PROBE_AUTO_MIN = 512  # --probe-health auto: probe levels of at least this many clients
PROBE_COLUMNS = ("n", "p50", "p99", "max", "errors", "over_100ms")


def runs_for(concurrency: int, delay: float, quick: bool) -> int:
    """Bounded run count per level: enough for percentiles, a few passes of every client."""
    base = 100 if quick else 300
    if delay > 0:
        base = base // 2
    return max(base, concurrency * (2 if quick else 3))


def merge(a: ProbeResult, b: ProbeResult) -> ProbeResult:
    return ProbeResult(
        a.latencies + b.latencies, a.errors + b.errors, (a.error_samples + b.error_samples)[:3]
    )


def probe_note(r: dict[str, Any]) -> str:
    if "probe" not in r:
        return ""
    return "".join(
        f", {name} p99 {s['p99']} ms max {s['max']} ms ({s['n']} ok, {s['errors']} failed)"
        for name, s in r["probe"].items()
    )


def cpu_seconds(roles: dict[str, list[psutil.Process]]) -> dict[str, float]:
    out = {}
    for role, procs in roles.items():
        out[role] = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--worker-concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delays", default="0,0.01")
    parser.add_argument("--levels", default="")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument(
        "--words",
        type=int,
        default=INPUT_WORDS,
        help="echo input words (a reply is one token more): 1 vs 20 separates a run's fixed"
        " cost from its cost per token",
    )
    parser.add_argument(
        "--probe-health",
        choices=("auto", "all", "none"),
        default="auto",
        help="probe /health and GET /v1/runs/{id} every 100 ms: auto = levels of >= 512 clients",
    )
    args = parser.parse_args()
    args.level_list = [1, 8, 32] if args.quick else [1, 8, 32, 128, 512]
    if args.levels:
        args.level_list = [int(x) for x in args.levels.split(",")]
    if args.quick:
        args.rounds = 1
    return args


def probe_level(args: argparse.Namespace, concurrency: int) -> bool:
    return args.probe_health == "all" or (
        args.probe_health == "auto" and concurrency >= PROBE_AUTO_MIN
    )


Probed = dict[tuple[float, int], dict[str, ProbeResult]]


async def run_levels(args: argparse.Namespace) -> tuple[list[dict[str, Any]], Probed, str]:
    """Every (delay, concurrency) level, ``args.rounds`` times, on one deployment (workers
    restarted per delay): each round's figures, the probes pooled per level, Redis's version."""
    results: list[dict[str, Any]] = []
    probed: Probed = {}
    with deploy.Deployment("throughput") as dep:
        base = await dep.start_api()
        for delay in (float(x) for x in args.delays.split(",")):
            workers = await dep.start_workers(
                args.workers,
                echo_token_delay=delay,
                worker_concurrency=args.worker_concurrency,
            )
            roles = {
                "api": [dep.api_procs[0]],
                "workers": [psutil.Process(w.pid) for w in workers],
                "redis": [psutil.Process(dep.redis_server.process.pid)] if dep.redis_server else [],
                "client": [psutil.Process()],
            }
            probe_urls = await warm_up(base, args.timeout)
            for concurrency in args.level_list:
                for index in range(args.rounds):
                    r = await one_round(dep, base, args, roles, probe_urls, delay, concurrency)
                    if "probes" in r:
                        pooled = probed.setdefault((delay, concurrency), {})
                        for name, p in r.pop("probes").items():
                            pooled[name] = merge(pooled[name], p) if name in pooled else p
                    r["round"] = index + 1
                    results.append(r)
                    print(
                        f"delay={delay} c={concurrency} round={index + 1}: "
                        f"{r['runs_per_s']} runs/s, ttft p50 {r['ttft_ms']['p50']} ms, "
                        f"failures {r['failures']}{probe_note(r)}",
                        flush=True,
                    )
            dep.stop_workers(workers)
        return results, probed, dep.redis_version()


async def warm_up(base: str, limit_s: float) -> dict[str, str]:
    """A few runs at once, then one run to the end: the probe's URLs (its ``GET /v1/runs/{id}``
    reads that finished run)."""
    await level(base, 4, 20, limit_s)
    async with traffic.client_session() as session:
        finished_run = await traffic.post_run(session, base, "probe target")
        await traffic.read_events(session, base, finished_run)
    return {"health": base + "/health", "get_run": f"{base}/v1/runs/{finished_run}"}


async def one_round(
    dep: deploy.Deployment,
    base: str,
    args: argparse.Namespace,
    roles: dict[str, list[psutil.Process]],
    probe_urls: dict[str, str],
    delay: float,
    concurrency: int,
) -> dict[str, Any]:
    """One round of a level: its runs' figures, Redis commands per token, CPU per run by role,
    and (on a probed level) the probe's summary and its raw results under ``probes``."""
    runs = runs_for(concurrency, delay, args.quick)
    prober = Prober(probe_urls) if probe_level(args, concurrency) else None
    commands, cpu = dep.total_commands(), cpu_seconds(roles)
    r = await level(base, concurrency, runs, args.timeout, args.words)
    commands = dep.total_commands() - commands - 1
    after = cpu_seconds(roles)
    if prober is not None:
        probes = await prober.stop()
        r["probe"] = {name: p.summary() for name, p in probes.items()}
        r["probes"] = probes
    per_run = {k: round((after[k] - cpu[k]) * 1000 / max(r["ok"], 1), 2) for k in cpu}
    r.update(
        delay=delay,
        concurrency=concurrency,
        # Counts commands run inside Lua scripts too; see redis_cost.py.
        redis_cmds_per_token=round(commands / max(r["deltas"], 1), 3),
        cpu_ms_per_run=per_run,
    )
    return r


def summarize(results: list[dict[str, Any]], probed: Probed) -> list[dict[str, Any]]:
    """Per (delay, concurrency): medians over rounds, failures summed, the pooled probes."""
    summary = []
    keyed: dict[tuple[float, int], list[dict[str, Any]]] = {}
    for r in results:
        keyed.setdefault((r["delay"], r["concurrency"]), []).append(r)
    for (delay, concurrency), rs in keyed.items():

        def med(get: Any, rs: list[dict[str, Any]] = rs) -> float:
            return round(float(statistics.median(get(r) for r in rs)), 2)

        row = {
            "delay": delay,
            "concurrency": concurrency,
            "rounds": len(rs),
            "runs_per_s": med(lambda r: r["runs_per_s"]),
            "ttft_p50_ms": med(lambda r: r["ttft_ms"]["p50"]),
            "ttft_p99_ms": med(lambda r: r["ttft_ms"]["p99"]),
            "total_p50_ms": med(lambda r: r["total_ms"]["p50"]),
            "total_p99_ms": med(lambda r: r["total_ms"]["p99"]),
            "failures": sum(r["failures"] for r in rs),
            "cmds_per_token*": med(lambda r: r["redis_cmds_per_token"]),
            **{
                f"cpu_ms_{role}": med(lambda r, role=role: r["cpu_ms_per_run"][role])
                for role in ("api", "workers", "redis", "client")
            },
        }
        summary.append(row)
        if (delay, concurrency) in probed:
            row["probe"] = {k: p.summary() for k, p in probed[(delay, concurrency)].items()}
    return summary


def print_tables(args: argparse.Namespace, summary: list[dict[str, Any]], probed: Probed) -> None:
    report.print_table(
        f"throughput, {args.workers} worker(s) × {args.worker_concurrency} slots, "
        f"{args.words + 1} tokens per run (medians over rounds)",
        [k for k in summary[0] if k != "probe"],
        [[v for k, v in row.items() if k != "probe"] for row in summary],
    )
    print("  * Redis total_commands_processed per token, including commands inside Lua scripts")
    if probed:
        report.print_table(
            "API responsiveness while the level runs (separate process, new connection per "
            "request, 100 ms apart; all rounds pooled; target ≤ 100 ms)",
            ["delay", "clients", "request", "n", "p50 ms", "p99 ms", "max ms", "failed", ">100ms"],
            [
                [delay, concurrency, name, *(s[q] for q in PROBE_COLUMNS)]
                for (delay, concurrency), pooled in probed.items()
                for name, p in pooled.items()
                if (s := p.summary())
            ],
        )


async def main() -> None:
    args = parse_args()
    traffic.raise_nofile(max(args.level_list) * 2 + 1024)
    results, probed, redis_version = await run_levels(args)
    summary = summarize(results, probed)
    print_tables(args, summary, probed)
    report.emit_json(
        "throughput",
        {
            "workers": args.workers,
            "worker_concurrency": args.worker_concurrency,
            "tokens_per_run": args.words + 1,
            "summary": summary,
            "rounds": results,
            "redis": redis_version,
            "machine": report.machine_facts(),
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
