"""Redis CPU and Redis commands per streamed token, in the full stack, at a steady token rate.

Issue 25's measure of "Redis cycles per token": ``--concurrency`` (128) closed-loop clients,
each posting an echo run of ``--words`` (200) words (``--words`` + 1 tokens) and reading its
whole SSE, the echo streaming ``--delay`` (0.02 s: 50 tokens/s) apart, through one API and one
worker (``--worker-concurrency`` slots). Over each round (after a warm-up): Redis' own CPU
(``INFO cpu`` ``used_cpu_user`` + ``used_cpu_sys`` deltas) per streamed token, Redis commands
per token (``total_commands_processed`` delta: commands inside scripts included, as the target
counts them; and script calls alone, ``EVALSHA``), stream entries written per token, the
``message.delta`` frames a reader got per token, and time to first token (POST sent → first
delta frame); the API's, the worker's and the clients' CPU per token too (what an API
replica and a worker carry at that rate). The run's fixed work (create, claim, finish, the SSE
request's reads) is in every figure, shared by its tokens.

    python -m bench.token_cost [--rounds 2] [--runs 256] [--concurrency 128] [--words 200]
        [--delay 0.02] [--coalesce-ms N]

``--coalesce-ms`` sets the workers' ``stream_coalesce_ms`` (left at the checkout's default when
not given). To compare two commits in one sitting, run this script from an export of each
(bench/README.md) and alternate them; one figure per round is printed so spreads show.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import psutil

from bench.lib import closed_loop, deploy, report


def redis_cpu_s(dep: deploy.Deployment) -> float:
    cpu = dep.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def calls(dep: deploy.Deployment, *names: str) -> int:
    """How many times Redis ran these commands so far (``INFO commandstats``; commands run
    inside scripts included)."""
    stats = dep.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in names)


async def one_round(
    dep: deploy.Deployment, base: str, args: argparse.Namespace, procs: dict[str, psutil.Process]
) -> dict[str, Any]:
    cpu0, cmd0 = redis_cpu_s(dep), dep.total_commands()
    eval0, xadd0 = calls(dep, "evalsha", "eval"), calls(dep, "xadd")
    proc0 = {role: report.cpu_s(proc) for role, proc in procs.items()}
    result = await closed_loop.level(base, args.concurrency, args.runs, args.timeout, args.words)
    cpu1, cmd1 = redis_cpu_s(dep), dep.total_commands()
    eval1, xadd1 = calls(dep, "evalsha", "eval"), calls(dep, "xadd")
    proc1 = {role: report.cpu_s(proc) for role, proc in procs.items()}
    tokens = max(result["deltas"], 1)
    return {
        **{
            f"{role}_cpu_us_per_token": round((proc1[role] - proc0[role]) / tokens * 1e6, 2)
            for role in procs
        },
        "ok": result["ok"],
        "failures": result["failures"],
        "tokens": result["deltas"],
        "tokens_per_s": round(result["deltas"] / result["elapsed_s"], 1),
        "redis_cpu_us_per_token": round((cpu1 - cpu0) / tokens * 1e6, 2),
        "redis_cpu_pct": round((cpu1 - cpu0) / result["elapsed_s"] * 100, 1),
        "commands_per_token": round((cmd1 - cmd0) / tokens, 3),
        "script_calls_per_token": round((eval1 - eval0) / tokens, 3),
        "entries_per_token": round((xadd1 - xadd0) / tokens, 3),
        "frames_per_token": round(result["delta_frames"] / tokens, 3),
        "ttft_ms": result["ttft_ms"],
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runs", type=int, default=256, help="runs per round")
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--worker-concurrency", type=int, default=160)
    parser.add_argument("--words", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.02, help="echo seconds per token")
    parser.add_argument("--coalesce-ms", type=float, default=None, help="stream_coalesce_ms")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per round at most")
    parser.add_argument("--label", default="", help="a name for this side in the JSON line")
    return parser.parse_args()


async def run_rounds(args: argparse.Namespace) -> tuple[list[dict[str, Any]], float]:
    """The rounds on one deployment: each round's figures, and the workers' window."""
    overrides: dict[str, Any] = {
        "echo_token_delay": args.delay,
        "worker_concurrency": args.worker_concurrency,
    }
    if args.coalesce_ms is not None:  # only when given: the checkout's default otherwise
        overrides["stream_coalesce_ms"] = args.coalesce_ms
    rounds: list[dict[str, Any]] = []
    with deploy.Deployment("token-cost", overrides=overrides) as dep:
        base = await dep.start_api()
        [worker] = await dep.start_workers(1)
        procs = {
            "api": dep.api_procs[0],
            "worker": psutil.Process(worker.pid),
            "client": psutil.Process(),
        }
        await closed_loop.level(base, 8, 16, 60, 20)  # warm-up: pools at their working size
        for index in range(args.rounds):
            rounds.append(await one_round(dep, base, args, procs))
            print(f"round {index + 1}: {rounds[-1]}", flush=True)
        return rounds, dep.settings.runs.stream_coalesce_ms


FIGURES = (
    "redis_cpu_us_per_token",
    "api_cpu_us_per_token",
    "worker_cpu_us_per_token",
    "client_cpu_us_per_token",
    "commands_per_token",
    "script_calls_per_token",
    "entries_per_token",
    "frames_per_token",
    "redis_cpu_pct",
    "tokens_per_s",
)


def print_rounds(args: argparse.Namespace, rounds: list[dict[str, Any]], coalesce: float) -> None:
    rows: list[list[Any]] = [
        [name, report.median([r[name] for r in rounds]), " ".join(str(r[name]) for r in rounds)]
        for name in FIGURES
    ]
    for q in ("p50", "p99"):
        values = [r["ttft_ms"][q] for r in rounds]
        rows.append([f"TTFT {q} ms", report.median(values), " ".join(str(v) for v in values)])
    report.print_table(
        f"Redis per streamed token: {args.concurrency} streams, {args.words + 1} tokens per run, "
        f"{args.delay * 1000:g} ms/token, stream_coalesce_ms {coalesce:g} ({args.label or 'this'})",
        ["figure", "median", "rounds"],
        rows,
    )


async def main() -> None:
    args = parse_args()
    rounds, coalesce = await run_rounds(args)
    print_rounds(args, rounds, coalesce)
    report.emit_json(
        "token_cost",
        {
            "label": args.label,
            "stream_coalesce_ms": coalesce,
            "concurrency": args.concurrency,
            "tokens_per_run": args.words + 1,
            "delay": args.delay,
            "rounds": rounds,
            "machine": report.machine_facts(),
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
