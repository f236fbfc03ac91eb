"""The floor and the overhead over it: the bare Hermes agent turn against the same turn through
hermes-queue (API + worker + Redis), on the same traffic, interleaved.

- **floor**: ``bench/lib/floor_agent.py`` in a child process: the worker's ``HermesBackend``
  builds the agent and runs each turn exactly as a worker does, in threads, with no HTTP, Redis
  or store; a conversation keeps its agent and its history in memory;
- **stack**: ``bench.lib.deploy.Deployment`` (private Redis, one API, ``--workers`` workers with
  ``agent_backend = "hermes"`` and a slot per client), driven over session chat streams: each
  conversation is a session (created before the window), each turn ``POST
  /api/sessions/{id}/chat/stream`` read to its ``done`` frame;
- both sides: the same fake LLM (``tests/support/fake_llm.py`` in its benchmark form, its own
  process, not counted; 20 tokens, ``--token-delay`` s before each), the same ``config.yaml``
  (``bench.lib.sides.hermes_home``),
  Hermes' default toolsets for the api_server platform; C conversations × T turns at
  concurrency K (K = each of ``--levels``; C = max(K, ``--min-conversations``));
- CPU per turn: the floor's ``time.process_time`` over its window; the stack's API + workers +
  Redis (psutil) over the window + 0.5 s. **overhead = stack CPU per turn / floor CPU per turn**
  (target ≤ 1.25); TTFT: the call (floor) or the POST (stack) → the first token; **TTFT − floor
  TTFT** at p50 (target ≤ 10 ms at one client). Every stack turn must end with the fake's reply
  for its turn number (the history went along) and ``done``; failures are reported and make
  the script exit non-zero.
- model calls per turn, both sides: the fake LLM's count of chat completions over the window
  (``GET /_stats``): the same on both, or the sides did not do the same work (Hermes' background
  reviews, every tenth turn of a conversation, are model calls too);
- rounds alternate the sides level by level; figures are medians over rounds, ratios per round.
- ``--coalesce-ms N`` runs the stack with ``stream_coalesce_ms = N`` (deltas merged over N ms);
  without it, the deployment's default (80 ms).

    python -m bench.floor [--quick] [--rounds 3] [--levels 1,32] [--turns 3] [--workers 1]
        [--token-delay 0.01] [--sides floor,stack] [--coalesce-ms N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import aiohttp

from bench.lib import deploy, report, traffic
from bench.lib.sides import (
    LLM_KEY,
    Side,
    hermes_home,
    idle_cpu,
    queue_deployment,
    start_fake_llm,
    start_queue,
)
from tests.support.fake_llm import BENCH_MODEL
from tests.support.fake_llm_process import FakeLLMProcess
from tests.support.processes import child_env
from tests.support.upstream import HERMES_PREFIXES

SETTLE_S = 0.5
CHAT_PATH = "/v1/chat/completions"  # what the fake LLM counts model calls by (GET /_stats)
FLOOR_AGENT = "bench.lib.floor_agent"


class FloorProcess:
    """``bench/lib/floor_agent.py`` as a child: one JSON command per line in, one JSON result
    out."""

    def __init__(self, llm: FakeLLMProcess) -> None:
        self.home = hermes_home(llm.base_url, "hq-bench-floor-home-")
        spec = {
            "hermes_home": str(self.home),
            "base_url": llm.base_url,
            "api_key": LLM_KEY,
            "model": BENCH_MODEL,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", FLOOR_AGENT, json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=self.home,
            env=child_env(strip=HERMES_PREFIXES),
        )
        if not self._read().get("ready"):
            raise RuntimeError("floor process did not start")

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"floor process exited ({self.proc.poll()})")
        return dict(json.loads(line))

    async def run(self, conversations: int, turns: int, concurrency: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        command = {"conversations": conversations, "turns": turns, "concurrency": concurrency}
        self.proc.stdin.write((json.dumps(command) + "\n").encode())
        self.proc.stdin.flush()
        return await asyncio.to_thread(self._read)

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write(b'{"quit": true}\n')
                self.proc.stdin.close()
                self.proc.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(5)


async def stack_run(side: Side, conversations: int, turns: int, concurrency: int) -> dict[str, Any]:
    ids = await traffic.create_sessions(side.base, conversations)
    pending = list(ids)
    samples: list[tuple[float, float]] = []
    failures: list[str] = []

    async def client(session: aiohttp.ClientSession) -> None:
        while pending:
            session_id = pending.pop()
            for index in range(1, turns + 1):
                try:
                    samples.append(await traffic.stream_turn(session, side.base, session_id, index))
                except Exception as exc:
                    failures.append(repr(exc)[:200])
                    break

    before, wall = side.cpu(), time.perf_counter()
    async with traffic.client_session(limit=concurrency + 4, timeout=300) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    wall = time.perf_counter() - wall
    await asyncio.sleep(SETTLE_S)  # work finished just after the reply counts too
    after = side.cpu()
    return {
        "ok": len(samples),
        "failures": failures,
        "cpu_s_by_process": {k: after[k] - before[k] for k in before},
        "cpu_s": sum(after[k] - before[k] for k in before),
        "wall_s": wall,
        "ttft_s": [s[0] for s in samples],
        "total_s": [s[1] for s in samples],
    }


def figures(side: str, level: int, raw: dict[str, Any]) -> dict[str, Any]:
    ok = max(raw["ok"], 1)
    row: dict[str, Any] = {
        "side": side,
        "concurrency": level,
        "turns": raw["ok"],
        "failures": len(raw["failures"]),
        "failure_samples": raw["failures"][:3],
        "turns_per_s": round(raw["ok"] / raw["wall_s"], 2),
        "model_calls_per_turn": round(raw["model_calls"] / ok, 2),
        "cpu_ms_per_turn": round(raw["cpu_s"] * 1000 / ok, 2),
        "ttft_ms": report.summary_ms(raw["ttft_s"]),
        "total_ms": report.summary_ms(raw["total_s"]),
    }
    if "cpu_s_by_process" in raw:
        row["cpu_ms_by_process"] = {
            k: round(v * 1000 / ok, 2) for k, v in raw["cpu_s_by_process"].items()
        }
    return row


def summarize(results: list[dict[str, Any]], levels: list[int]) -> list[dict[str, Any]]:
    rows = []
    for level in levels:
        floor = [r for r in results if r["side"] == "floor" and r["concurrency"] == level]
        stack = [r for r in results if r["side"] == "stack" and r["concurrency"] == level]
        row: dict[str, Any] = {"concurrency": level, "rounds": max(len(floor), len(stack))}
        for name, rs in (("floor", floor), ("stack", stack)):
            row[f"{name}_cpu_ms"] = report.median([r["cpu_ms_per_turn"] for r in rs])
            row[f"{name}_ttft_p50_ms"] = report.median([r["ttft_ms"]["p50"] for r in rs])
            row[f"{name}_turns_s"] = report.median([r["turns_per_s"] for r in rs])
            row[f"{name}_model_calls"] = report.median([r["model_calls_per_turn"] for r in rs])
        if stack:
            row["stack_by_process"] = " · ".join(
                f"{k} {report.median([r['cpu_ms_by_process'][k] for r in stack])}"
                for k in stack[0]["cpu_ms_by_process"]
            )
        pairs = list(zip(floor, stack, strict=False))
        row["overhead_x"] = report.median(
            [s["cpu_ms_per_turn"] / f["cpu_ms_per_turn"] for f, s in pairs]
        )
        row["overhead_rounds"] = [
            round(s["cpu_ms_per_turn"] / f["cpu_ms_per_turn"], 2) for f, s in pairs
        ]
        row["ttft_minus_floor_ms"] = report.median(
            [s["ttft_ms"]["p50"] - f["ttft_ms"]["p50"] for f, s in pairs]
        )
        row["failures"] = sum(r["failures"] for r in floor + stack)
        rows.append(row)
    return rows


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round, 2 turns")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--levels", default="1,32", help="concurrencies, comma-separated")
    parser.add_argument("--turns", type=int, default=3, help="turns per conversation")
    parser.add_argument("--min-conversations", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--token-delay", type=float, default=0.01)
    parser.add_argument("--sides", default="floor,stack")
    parser.add_argument("--coalesce-ms", type=float, default=None, help="stream_coalesce_ms")
    args = parser.parse_args()
    args.level_list = [int(x) for x in args.levels.split(",") if x.strip()]
    args.side_list = [s.strip() for s in args.sides.split(",") if s.strip()]
    if not args.side_list or not set(args.side_list) <= {"floor", "stack"}:
        parser.error("--sides: a comma-separated subset of floor,stack")
    if args.quick:
        args.rounds, args.turns = 1, 2
    return args


async def start_stack(args: argparse.Namespace, llm_url: str) -> tuple[deploy.Deployment, Side]:
    """The stack side: a deployment on the fake LLM, its workers, warmed up as the floor."""
    # stream_coalesce_ms only when given (0 too): a pinned older commit lacks it.
    given = args.coalesce_ms is not None
    coalesce = {"stream_coalesce_ms": args.coalesce_ms} if given else {}
    dep = queue_deployment("floor", llm_url, max(args.level_list), **coalesce)
    stack = await start_queue(dep, args.workers)
    await stack_run(stack, 2, 2, 2)  # warm-up, as the floor's
    print(f"stack idle CPU ms/s: {await idle_cpu(stack)}", flush=True)
    return dep, stack


async def run_rounds(
    args: argparse.Namespace,
    llm: FakeLLMProcess,
    floor: FloorProcess | None,
    stack: Side | None,
) -> list[dict[str, Any]]:
    """Every round, every level, every side in turn (interleaved): each one's figures."""
    results: list[dict[str, Any]] = []
    for index in range(args.rounds):
        for level in args.level_list:
            conversations = max(level, args.min_conversations)
            for name in args.side_list:
                calls = (await llm.stats()).get(CHAT_PATH, 0)
                if name == "floor" and floor is not None:
                    raw = await floor.run(conversations, args.turns, level)
                elif stack is not None:
                    raw = await stack_run(stack, conversations, args.turns, level)
                # Both sides must make the same model calls (the agent's background reviews
                # included), or the comparison is not of the same work.
                raw["model_calls"] = (await llm.stats()).get(CHAT_PATH, 0) - calls
                row = figures(name, level, raw)
                row["round"] = index + 1
                results.append(row)
                print(
                    f"round {index + 1} c={level:<3} {name:5}: {row['turns']} turns, "
                    f"{row['cpu_ms_per_turn']} CPU ms/turn "
                    f"{row.get('cpu_ms_by_process', '')}, TTFT p50 {row['ttft_ms']['p50']} "
                    f"ms, {row['turns_per_s']} turns/s, {row['model_calls_per_turn']} model calls "
                    f"per turn, failures {row['failures']}",
                    flush=True,
                )
                for problem in row["failure_samples"]:
                    print(f"    failure: {problem}", flush=True)
    return results


def print_report(args: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    summary = summarize(results, args.level_list)
    report.print_table(
        f"overhead over the bare agent (session chat streams, {args.turns} turns per "
        f"conversation, fake LLM {args.token_delay * 1000:g} ms/token, {args.workers} worker(s); "
        f"medians of {args.rounds} round(s); target overhead ≤ 1.25, TTFT ≤ floor + 10 ms)",
        [k for k in summary[0] if k != "overhead_rounds"],
        [[v for k, v in row.items() if k != "overhead_rounds"] for row in summary],
    )
    params = ("rounds", "levels", "turns", "min_conversations", "workers", "token_delay")
    report.emit_json(
        "floor",
        {
            "machine": report.machine_facts(),
            "params": {k: getattr(args, k) for k in params},
            "summary": summary,
            "rounds": results,
        },
    )


async def main() -> None:
    args = parse_args()
    llm = start_fake_llm(args.token_delay)
    floor: FloorProcess | None = None
    dep: deploy.Deployment | None = None
    stack: Side | None = None
    try:
        if "floor" in args.side_list:
            floor = FloorProcess(llm)
            await floor.run(2, 2, 2)  # warm-up: imports done, clients and caches built
        if "stack" in args.side_list:
            dep, stack = await start_stack(args, llm.base_url)
        results = await run_rounds(args, llm, floor, stack)
    finally:
        if dep is not None:
            dep.stop()
        if floor is not None:
            floor.stop()
        llm.stop()
    print_report(args, results)
    if any(r["failures"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main())
