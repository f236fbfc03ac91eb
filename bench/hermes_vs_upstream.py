"""Time to first token and throughput: upstream Hermes (0.19.0) API server against hermes-queue's
``hermes`` backend with 1 and with 2 workers, on identical streaming chat completions.

Targets (docs/targets.md): time to first token, 1 client, fake LLM at 10 ms/token, Hermes backend ≤
upstream + 5 ms; throughput with 128 concurrent clients ≥ 1.5 × upstream with 2 worker
processes, in the same run.

How:
- the servers are started exactly as ``cpu_per_run.py`` starts them (``bench/lib/sides.py``):
  the fake LLM (``tests/support/fake_llm.py`` in its benchmark form, its own process,
  ``--token-delay`` s before each of its 20 tokens),
  upstream's ``python -m hermes_cli.main gateway run`` in a private ``HERMES_HOME`` whose
  ``config.yaml`` points at the fake, and hermes-queue deployments (private Redis, one API, N
  workers, ``agent_backend = "hermes"``, the same ``config.yaml`` in their ``hermes_home``).
  Upstream's ``gateway.api_server.max_concurrent_runs`` is set to 0 (uncapped, as in
  docs/targets.md's upstream figures): its default of 10 would answer 128 clients with 429s.
- every side runs at once (idle when not measured); phases are interleaved side by side in every
  round, so drift on the shared machine hits all of them;
- every turn, on every side, is the same request: ``POST /v1/chat/completions`` with
  ``"stream": true``, one user message and a new ``X-Hermes-Session-Id`` (a new conversation:
  upstream builds an agent for each request anyway, hermes-queue has no warm agent for it). It
  counts only with HTTP 200, exactly the fake's 20-token reply as the streamed content, and
  ``data: [DONE]``; anything else is a failure, reported, and the script exits non-zero;
- **time to first token** = request sent → first non-empty content delta read by the client;
  one client, ``--ttft-turns`` sequential turns per round after ``--ttft-warmup`` turns
  (nearest-rank percentiles: with 60 turns, p99 is the slowest one);
- **throughput**: ``--clients`` closed-loop clients (each starts its next turn as soon as the
  last one ends). The window runs from the end of the ``--ramp-turns``-th turn (default: one
  per client) to the end of the next ``--window-turns`` (default: 2 × clients): whole
  "generations" of the closed loop, because upstream finishes its 128 turns in waves (all of
  them within a few seconds, then nothing for 30–40 s), which a window of fixed seconds would
  cut at a random phase. Runs/s = successful turns in the window / its length. Then clients
  stop starting turns and every turn in flight must finish. Every wait is bounded
  (``--ramp-limit``, ``--window-limit``, ``--turn-timeout`` per turn): a side that stalls is
  reported as a failure instead of hanging. Server CPU (every process of the side), the
  client's and the fake LLM's CPU over the window are reported per turn for context, with the
  whole machine's busy cores (``/proc/stat``: anything else running shows there), and a
  timeline of finished turns per 5 s in the JSON;
- figures per side: medians of the rounds; ratios are per round (same round) and of the medians.

    python -m bench.hermes_vs_upstream [--quick] [--rounds 3] [--workers 1,2] [--clients 128]
        [--window-turns 256] [--ttft-turns 60] [--token-delay 0.01] [--sides upstream,queue]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from typing import Any

import psutil

from bench.lib import report, traffic
from bench.lib.chat_phases import throughput_phase, ttft_phase, warm_up
from bench.lib.sides import (
    Side,
    Started,
    start_fake_llm,
    start_sides,
    warm_sides,
)

TTFT_TARGET_MS = 5.0  # hermes backend ≤ upstream + 5 ms
THROUGHPUT_TARGET = 1.5  # hermes backend, 2 workers ≥ 1.5 × upstream


# -- main ------------------------------------------------------------------------------------------
def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="1 round, 20 TTFT turns, window of 1 × clients turns"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sides", default="upstream,queue")
    parser.add_argument("--workers", default="1,2", help="hermes-queue deployments to measure")
    parser.add_argument("--worker-concurrency", type=int, default=64, help="slots per worker")
    parser.add_argument("--backend", choices=("auto", "hermes", "openai"), default="auto")
    parser.add_argument("--token-delay", type=float, default=0.01, help="fake LLM s/token")
    parser.add_argument("--ttft-turns", type=int, default=60, help="sequential turns per round")
    parser.add_argument("--ttft-warmup", type=int, default=3)
    parser.add_argument("--clients", type=int, default=128)
    parser.add_argument(
        "--ramp-turns", type=int, default=None, help="turns before the window (default: clients)"
    )
    parser.add_argument(
        "--window-turns", type=int, default=None, help="turns in the window (default: 2 × clients)"
    )
    parser.add_argument("--ramp-limit", type=float, default=240.0, help="longest ramp, s")
    parser.add_argument("--window-limit", type=float, default=600.0, help="longest window, s")
    parser.add_argument("--turn-timeout", type=float, default=300.0, help="per turn, s")
    parser.add_argument("--warmup-burst", type=int, default=16)
    args = parser.parse_args()
    args.side_set = {s.strip() for s in args.sides.split(",") if s.strip()}
    if not args.side_set or not args.side_set <= {"upstream", "queue"}:
        parser.error("--sides: a comma-separated subset of upstream,queue")
    try:
        args.worker_counts = [int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError:
        parser.error("--workers: comma-separated worker counts")
    if args.quick:
        args.rounds, args.ttft_turns = 1, 20
        args.window_turns = args.window_turns or args.clients
    args.ramp_turns = args.ramp_turns or args.clients
    args.window_turns = args.window_turns or 2 * args.clients
    return args


def summarize(results: list[dict[str, Any]], sides: list[str]) -> dict[str, Any]:
    by_side: dict[str, dict[str, Any]] = {}
    for name in sides:
        rs = [r for r in results if r["side"] == name]
        by_side[name] = {
            "rounds": len(rs),
            "ttft_p50_ms": report.median([r["ttft"]["ttft_ms"]["p50"] for r in rs]),
            "ttft_p99_ms": report.median([r["ttft"]["ttft_ms"]["p99"] for r in rs]),
            "ttft_pooled_ms": report.summary_ms(
                [v / 1000 for r in rs for v in r["ttft"]["samples_ms"]]
            ),
            "total_p50_ms": report.median([r["ttft"]["total_ms"]["p50"] for r in rs]),
            "runs_per_s": report.median([r["load"]["runs_per_s"] for r in rs]),
            "load_ttft_p50_ms": report.median([r["load"]["ttft_ms"]["p50"] for r in rs]),
            "load_total_p50_ms": report.median([r["load"]["total_ms"]["p50"] for r in rs]),
            "server_cpu_ms_per_turn": report.median(
                [r["load"]["server_cpu_ms_per_turn"] for r in rs]
            ),
            "server_cpu_cores": report.median([r["load"]["server_cpu_cores"] for r in rs]),
            "client_cpu_ms_per_turn": report.median(
                [r["load"]["client_cpu_ms_per_turn"] for r in rs]
            ),
            "machine_cpu_cores": report.median([r["load"]["machine_cpu_cores"] for r in rs]),
            "llm_cpu_ms_per_turn": report.median([r["load"]["llm_cpu_ms_per_turn"] for r in rs]),
            "failures": sum(len(r["ttft"]["failures"]) + len(r["load"]["failures"]) for r in rs),
        }
    return by_side


def ratios(results: list[dict[str, Any]], by_side: dict[str, Any]) -> dict[str, Any]:
    """Per queue side: TTFT p50 difference and throughput ratio against upstream, per round
    (same round) and of the medians."""
    out: dict[str, Any] = {}
    if "upstream" not in by_side:
        return out
    up = by_side["upstream"]
    for name, row in by_side.items():
        if name == "upstream":
            continue
        per_round = []
        for r in results:
            if r["side"] != name:
                continue
            u = next(x for x in results if x["side"] == "upstream" and x["round"] == r["round"])
            per_round.append(
                {
                    "round": r["round"],
                    "ttft_p50_delta_ms": round(
                        r["ttft"]["ttft_ms"]["p50"] - u["ttft"]["ttft_ms"]["p50"], 2
                    ),
                    "throughput_ratio": round(r["load"]["runs_per_s"] / u["load"]["runs_per_s"], 2)
                    if u["load"]["runs_per_s"]
                    else float("inf"),
                }
            )
        delta = round(row["ttft_p50_ms"] - up["ttft_p50_ms"], 2)
        ratio = round(row["runs_per_s"] / up["runs_per_s"], 2) if up["runs_per_s"] else float("inf")
        out[name] = {
            "ttft_p50_delta_ms": delta,
            "ttft_target_met": delta <= TTFT_TARGET_MS,
            "throughput_ratio": ratio,
            "throughput_target_met": ratio >= THROUGHPUT_TARGET if name == "queue-2w" else None,
            "per_round": per_round,
        }
    return out


async def run_rounds(
    args: argparse.Namespace, sides: list[Side], llm: psutil.Process
) -> list[dict[str, Any]]:
    """Every round: every side's TTFT phase, then every side's throughput phase (interleaved,
    so drift on the shared machine hits all of them)."""
    results: list[dict[str, Any]] = []
    for index in range(args.rounds):
        rnd: dict[str, dict[str, Any]] = {side.name: {} for side in sides}
        for side in sides:
            ttft = await ttft_phase(side, args, f"{side.name}-ttft-r{index + 1}")
            rnd[side.name]["ttft"] = ttft
            t = ttft["ttft_ms"]
            print(
                f"round {index + 1} TTFT       {side.name:9}: {ttft['ok']}/{ttft['turns']} ok, "
                f"p50 {t['p50']} ms, p99 {t['p99']} ms, total p50 {ttft['total_ms']['p50']} ms",
                flush=True,
            )
            for problem in ttft["failures"][:3]:
                print(f"    failure: {problem}", flush=True)
        for side in sides:
            load = await throughput_phase(side, args, llm, f"{side.name}-load-r{index + 1}")
            rnd[side.name]["load"] = load
            print_load(index, side.name, load)
        for name, r in rnd.items():
            results.append({"side": name, "round": index + 1, **r})
    return results


def print_load(index: int, name: str, load: dict[str, Any]) -> None:
    print(
        f"round {index + 1} throughput {name:9}: {load['runs_per_s']} runs/s "
        f"({load['ok_in_window']} in {load['window_s']} s; ramp {load['ramp_s']} s, "
        f"drain {load['drain_s']} s), TTFT p50 {load['ttft_ms']['p50']} ms, "
        f"server CPU {load['server_cpu_ms_per_turn']} ms/turn "
        f"{load['server_cpu_by_process']} = {load['server_cpu_cores']} cores, "
        f"client {load['client_cpu_ms_per_turn']}, LLM {load['llm_cpu_ms_per_turn']}; "
        f"machine {load['machine_cpu_cores']} cores busy",
        flush=True,
    )


COLUMNS = {  # header: the summary row's key
    "side": "",
    "TTFT p50": "ttft_p50_ms",
    "TTFT p99": "ttft_p99_ms",
    "total p50": "total_p50_ms",
    "runs/s": "runs_per_s",
    "TTFT p50 @load": "load_ttft_p50_ms",
    "total p50 @load": "load_total_p50_ms",
    "CPU ms/turn": "server_cpu_ms_per_turn",
    "cores": "server_cpu_cores",
    "machine cores": "machine_cpu_cores",
    "client ms": "client_cpu_ms_per_turn",
    "LLM ms": "llm_cpu_ms_per_turn",
    "failures": "failures",
}


def print_summary(
    args: argparse.Namespace, by_side: dict[str, Any], compared: dict[str, Any]
) -> None:
    rows = [
        [name, *(row[key] for key in list(COLUMNS.values())[1:])] for name, row in by_side.items()
    ]
    report.print_table(
        f"streaming chat completions, fake LLM {args.token_delay * 1000:g} ms/token, medians of "
        f"{args.rounds} round(s); TTFT 1 client × {args.ttft_turns} turns; throughput "
        f"{args.clients} clients, window of {args.window_turns} turns after {args.ramp_turns} "
        "(ms; CPU per turn in the window)",
        list(COLUMNS),
        rows,
    )
    for name, c in compared.items():
        throughput_note = (
            f" (target ≥ {THROUGHPUT_TARGET}: {'met' if c['throughput_target_met'] else 'NOT met'})"
            if c["throughput_target_met"] is not None
            else ""
        )
        print(
            f"{name}: TTFT p50 {c['ttft_p50_delta_ms']:+} ms vs upstream (target ≤ +"
            f"{TTFT_TARGET_MS:g}: {'met' if c['ttft_target_met'] else 'NOT met'}); throughput "
            f"{c['throughput_ratio']} × upstream{throughput_note}; per round "
            + ", ".join(
                f"{p['ttft_p50_delta_ms']:+} ms / {p['throughput_ratio']}×" for p in c["per_round"]
            )
        )


PARAMS = (
    "rounds",
    "token_delay",
    "ttft_turns",
    "ttft_warmup",
    "clients",
    "window_turns",
    "window_limit",
    "ramp_turns",
    "ramp_limit",
    "turn_timeout",
    "worker_concurrency",
    "worker_counts",
)


async def start(args: argparse.Namespace, llm_url: str, started: Started) -> list[Side]:
    sides = await start_sides(
        args.side_set,
        llm_url,
        started,
        backend=args.backend,
        worker_counts=args.worker_counts,
        worker_concurrency=args.worker_concurrency,
        # Uncapped, as docs/targets.md's upstream figures: a cap of 10 answers 429s.
        upstream_config={"gateway": {"api_server": {"max_concurrent_runs": 0}}},
        queue_name="queue-{workers}w",
    )
    for side in sides:
        if side.name == "upstream":
            side.describe["max_concurrent_runs"] = 0
    return sides


async def main() -> None:
    args = parse_args()
    traffic.raise_nofile(4 * args.clients + 256)
    llm = start_fake_llm(args.token_delay)
    started = Started()
    try:
        sides = await start(args, llm.base_url, started)
        idle = await warm_sides(sides, lambda side: warm_up(side, args))
        results = await run_rounds(args, sides, psutil.Process(llm.proc.pid))
        described = {side.name: side.describe for side in sides}
        redis_version = started.deployments[0].redis_version() if started.deployments else ""
    finally:
        started.stop()
        llm.stop()
    by_side = summarize(results, list(described))
    compared = ratios(results, by_side)
    print_summary(args, by_side, compared)
    report.emit_json(
        "hermes_vs_upstream",
        {
            "machine": report.machine_facts(),
            "load_average": os.getloadavg(),
            "redis_version": redis_version,
            "sides": described,
            "idle_cpu_ms_per_s": idle,
            "params": {k: getattr(args, k) for k in PARAMS},
            "summary": by_side,
            "compared": compared,
            "rounds": results,
        },
    )
    if any(r["ttft"]["failures"] or r["load"]["failures"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
