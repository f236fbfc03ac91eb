"""Server CPU seconds per agent turn: upstream Hermes (0.19.0) API server against hermes-queue.

Why: upstream runs every turn inside its HTTP process and builds a fresh ``AIAgent`` for each
request; hermes-queue's ``hermes`` backend runs the same agent in a long-lived arq worker that
keeps a session's agent warm between turns. The target (docs/targets.md) is ≤ 0.5 × upstream's CPU
per run. This script measures it on identical HTTP traffic.

How:
- the deterministic fake OpenAI-compatible LLM (``tests/support/fake_llm.py``, benchmark form)
  runs in its own process; every reply is 20 tokens ending in ``BENCH-REPLY-OK-u<n>``, n = user
  messages it was sent;
- **upstream**: ``python -m hermes_cli.main gateway run`` (= ``hermes gateway run``) with a
  private ``HERMES_HOME`` whose ``config.yaml`` points the model at the fake (``provider:
  custom``, ``base_url``, a dummy ``api_key``, ``context_length``) and enables only the
  ``api_server`` platform on a free loopback port;
- **hermes-queue**: ``bench/lib/deploy.py``'s Deployment (private Redis, ``python -m hermes_queue
  api`` + one ``worker``) with the ``hermes`` backend (``--backend openai``: the plain
  OpenAI-compatible backend, the machinery's own cost; ``auto`` falls back to it where no
  ``hermes`` backend is registered), a provider table naming the fake, and its own
  ``HERMES_HOME`` holding the same ``config.yaml``;
- both expose the same toolsets: upstream's default for the ``api_server`` platform
  (``hermes_toolsets`` empty on our side);
- workloads, the same requests on both sides: **multi-turn** (C conversations × T turns, each
  turn a non-streaming — ``--stream``: streaming — ``POST /v1/chat/completions`` carrying only
  its new user message and ``X-Hermes-Session-Id``, so the server keeps the history) and
  **single-turn** (N one-turn conversations, a new session id each), K at a time;
- each side is warmed up first; per round and workload, server CPU (psutil user + system of
  every server process and its descendants; Redis too for hermes-queue — ``INFO cpu`` when the
  Redis is shared) is read before and after the window (+ 0.5 s settle). The client and the fake
  LLM are never counted.
- a turn counts only if it answered 200 with the fake's reply whose user count equals the
  turn's index (the server sent the whole conversation) and the same session id; afterwards every
  conversation's transcript (``GET /api/sessions/{id}/messages``) must hold T user and T
  assistant messages. Any failure is reported and makes the script exit non-zero.

    python -m bench.cpu_per_run [--quick] [--rounds 3] [--conversations 20 --turns 5]
        [--single 40] [--concurrency 4] [--backend auto|hermes|openai] [--stream]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from bench.lib import report, traffic
from bench.lib.sides import (
    SESSION_HEADER,
    Side,
    Started,
    start_fake_llm,
    start_sides,
    warm_sides,
)
from tests.support.fake_llm import FIXED_MARKER
from tests.support.fake_llm_process import FakeLLMProcess

SETTLE_S = 0.5


@dataclass(frozen=True)
class Workload:
    name: str
    conversations: int
    turns: int

    @property
    def total(self) -> int:
        return self.conversations * self.turns


# -- the client ------------------------------------------------------------------------------------
async def one_turn(
    session: aiohttp.ClientSession, base: str, session_id: str, index: int, stream: bool
) -> str | None:
    """One turn of a conversation; None when it succeeded, else why it did not."""
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": f"Turn {index}: please answer briefly."}],
    }
    if stream:
        body["stream"] = True
    headers = {SESSION_HEADER: session_id}
    async with session.post(base + "/v1/chat/completions", json=body, headers=headers) as r:
        if r.status != 200:
            return f"HTTP {r.status}: {(await r.text())[:200]}"
        if stream:
            content = (await traffic.read_stream_reply(r)).text
        else:
            data = await r.json()
            content = str(((data.get("choices") or [{}])[0].get("message") or {}).get("content"))
        echoed = r.headers.get(SESSION_HEADER)
    expected = f"{FIXED_MARKER}{index}"
    if not content.rstrip().endswith(expected):
        return f"turn {index}: reply {content[-60:]!r} does not end with {expected!r}"
    if echoed != session_id:
        return f"turn {index}: session header {echoed!r}, sent {session_id!r}"
    return None


async def run_workload(
    side: Side, workload: Workload, concurrency: int, stream: bool, tag: str, limit_s: float
) -> dict[str, Any]:
    """Every conversation's turns in order, ``concurrency`` conversations at a time."""
    ids = [f"{tag}-{i}-{uuid.uuid4().hex[:8]}" for i in range(workload.conversations)]
    pending = list(reversed(ids))
    ok = 0
    failures: list[str] = []
    latencies: list[float] = []

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal ok
        while pending:
            session_id = pending.pop()
            for index in range(1, workload.turns + 1):
                sent = time.monotonic()
                try:
                    problem = await one_turn(session, side.base, session_id, index, stream)
                except Exception as exc:  # a failed turn, not a crashed benchmark
                    problem = repr(exc)[:200]
                if problem is not None:
                    failures.append(problem)
                    break  # the rest of this conversation would fail the history check anyway
                latencies.append(time.monotonic() - sent)
                ok += 1

    started = time.monotonic()
    async with traffic.client_session(limit=concurrency + 4, timeout=limit_s) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    return {
        "ids": ids,
        "ok": ok,
        "failures": failures,
        "elapsed_s": time.monotonic() - started,
        "latency_ms": report.summary_ms(latencies),
    }


async def check_transcripts(side: Side, ids: list[str], turns: int) -> list[str]:
    """Each conversation's stored transcript holds exactly ``turns`` user and assistant turns."""
    problems: list[str] = []
    async with traffic.client_session(limit=8, timeout=60) as session:
        for session_id in ids:
            url = f"{side.base}/api/sessions/{session_id}/messages?limit=500"
            async with session.get(url) as r:
                if r.status != 200:
                    problems.append(f"{session_id}: transcript HTTP {r.status}")
                    continue
                roles = [m.get("role") for m in (await r.json()).get("data") or []]
            counts = (roles.count("user"), roles.count("assistant"))
            if counts != (turns, turns):
                problems.append(f"{session_id}: transcript has {counts} user/assistant messages")
    return problems


async def llm_chat_calls(llm: FakeLLMProcess) -> dict[str, int]:
    """Chat requests so far, in total and per tool set offered (``tools=N:<hash>``)."""
    stats = await llm.stats()
    return {k: v for k, v in stats.items() if k == "/v1/chat/completions" or k.startswith("tools=")}


async def measure(
    side: Side,
    workload: Workload,
    args: argparse.Namespace,
    llm: FakeLLMProcess,
    tag: str,
) -> dict[str, Any]:
    calls = await llm_chat_calls(llm)
    before = side.cpu()
    result = await run_workload(side, workload, args.concurrency, args.stream, tag, args.timeout)
    await asyncio.sleep(SETTLE_S)  # work a server finishes just after answering counts too
    after = side.cpu()
    calls_after = await llm_chat_calls(llm)
    calls = {k: v - calls.get(k, 0) for k, v in calls_after.items() if v - calls.get(k, 0)}
    problems = result["failures"] + await check_transcripts(side, result["ids"], workload.turns)
    ok = result["ok"]
    per_role = {role: (after[role] - before[role]) * 1000 / max(ok, 1) for role in before}
    return {
        "side": side.name,
        "workload": workload.name,
        "turns": workload.total,
        "ok": ok,
        "failures": len(problems),
        "failure_samples": problems[:3],
        "wall_s": round(result["elapsed_s"], 3),
        "turns_per_s": round(ok / result["elapsed_s"], 2),
        "latency_ms": result["latency_ms"],
        "cpu_ms_per_turn": round(sum(per_role.values()), 2),
        "cpu_ms_per_turn_by_process": {k: round(v, 2) for k, v in per_role.items()},
        "llm_calls_per_turn": round(calls.get("/v1/chat/completions", 0) / max(ok, 1), 3),
        "tool_sets": sorted(k.removeprefix("tools=") for k in calls if k.startswith("tools=")),
    }


# -- main ------------------------------------------------------------------------------------------
def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4×3 + 8 turns, 1 round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--single", type=int, default=40, help="one-turn conversations")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=3, help="warm-up conversations × 2 turns")
    parser.add_argument("--sides", default="upstream,queue")
    parser.add_argument("--backend", choices=("auto", "hermes", "openai"), default="auto")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--worker-concurrency", type=int, default=16)
    parser.add_argument(
        "--agent-cache-size", type=int, default=None, help="default: the setting's default"
    )
    parser.add_argument("--stream", action="store_true", help="streaming completions")
    parser.add_argument("--token-delay", type=float, default=0.0, help="fake LLM s/token")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    sides = {s.strip() for s in args.sides.split(",") if s.strip()}
    if not sides or not sides <= {"upstream", "queue"}:
        parser.error("--sides: a comma-separated subset of upstream,queue")
    if args.quick:
        args.conversations, args.turns, args.single, args.rounds = 4, 3, 8, 1
        args.warmup = min(args.warmup, 2)
    return args


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    keyed: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        keyed.setdefault((r["workload"], r["side"]), []).append(r)
    upstream_cpu: dict[str, float] = {}
    for (workload, side), rs in keyed.items():
        row: dict[str, Any] = {
            "workload": workload,
            "side": side,
            "rounds": len(rs),
            "turns_ok": sum(r["ok"] for r in rs),
            "failures": sum(r["failures"] for r in rs),
            "wall_s": report.median([r["wall_s"] for r in rs]),
            "turns_per_s": report.median([r["turns_per_s"] for r in rs]),
            "latency_p50_ms": report.median([r["latency_ms"]["p50"] for r in rs]),
            "cpu_ms_per_turn": report.median([r["cpu_ms_per_turn"] for r in rs]),
            "by_process": " · ".join(
                f"{role} {report.median([r['cpu_ms_per_turn_by_process'][role] for r in rs])}"
                for role in rs[0]["cpu_ms_per_turn_by_process"]
            ),
            "llm_calls_per_turn": report.median([r["llm_calls_per_turn"] for r in rs]),
            "tools_offered": " ".join(sorted({t for r in rs for t in r["tool_sets"]})),
        }
        if side == "upstream":
            upstream_cpu[workload] = row["cpu_ms_per_turn"]
        rows.append(row)
    for row in rows:
        base = upstream_cpu.get(row["workload"])
        row["ratio_vs_upstream"] = round(row["cpu_ms_per_turn"] / base, 3) if base else "–"
    return rows


async def run_rounds(
    args: argparse.Namespace, sides: list[Side], llm: FakeLLMProcess
) -> list[dict[str, Any]]:
    """Every round, every workload, every side in turn (interleaved, so drift on the machine
    hits both sides): each one's figures."""
    workloads = [
        Workload("multi-turn", args.conversations, args.turns),
        Workload("single-turn", args.single, 1),
    ]
    results: list[dict[str, Any]] = []
    for index in range(args.rounds):
        for workload in workloads:
            for side in sides:
                tag = f"{side.name}-{workload.name}-r{index + 1}"
                r = await measure(side, workload, args, llm, tag)
                r["round"] = index + 1
                results.append(r)
                print(
                    f"round {index + 1} {workload.name:11} {side.name:12}: "
                    f"{r['ok']}/{r['turns']} ok, {r['cpu_ms_per_turn']} CPU ms/turn "
                    f"{r['cpu_ms_per_turn_by_process']}, {r['turns_per_s']} turns/s",
                    flush=True,
                )
                for problem in r["failure_samples"]:
                    print(f"    failure: {problem}", flush=True)
    return results


def warm_up(args: argparse.Namespace) -> Callable[[Side], Awaitable[None]]:
    async def warm(side: Side) -> None:
        workload = Workload("warm-up", args.warmup, 2)
        r = await run_workload(side, workload, args.concurrency, args.stream, "warm", args.timeout)
        if r["failures"]:
            raise RuntimeError(f"{side.name} warm-up failed: {r['failures'][:3]}")

    return warm


PARAMS = (
    "conversations",
    "turns",
    "single",
    "concurrency",
    "rounds",
    "stream",
    "token_delay",
    "warmup",
)


def print_report(args: argparse.Namespace, results: list[dict[str, Any]], **facts: Any) -> None:
    """The table of medians, and the JSON line with ``facts`` (sides, Redis, idle CPU)."""
    summary = summarize(results)
    report.print_table(
        f"server CPU per agent turn (medians of {args.rounds} round(s), concurrency "
        f"{args.concurrency}, {'streaming' if args.stream else 'non-streaming'})",
        list(summary[0].keys()),
        [list(row.values()) for row in summary],
    )
    offered = {row["tools_offered"] for row in summary}
    if len(offered) > 1:
        print(f"\nNOTE: the sides offered the model different tool sets: {sorted(offered)}")
    report.emit_json(
        "cpu_per_run",
        {
            "machine": report.machine_facts(),
            **facts,
            "params": {k: getattr(args, k) for k in PARAMS},
            "summary": summary,
            "rounds": results,
        },
    )


async def main() -> None:
    args = parse_args()
    llm = start_fake_llm(args.token_delay)
    started = Started()
    try:
        sides = await start_sides(
            {s.strip() for s in args.sides.split(",") if s.strip()},
            llm.base_url,
            started,
            backend=args.backend,
            worker_counts=[args.workers],
            worker_concurrency=args.worker_concurrency,
            agent_cache_size=args.agent_cache_size,
        )
        idle = await warm_sides(sides, warm_up(args))
        results = await run_rounds(args, sides, llm)
        described = {side.name: side.describe for side in sides}
        redis_version = started.deployments[0].redis_version() if started.deployments else ""
    finally:
        started.stop()
        llm.stop()
    print_report(
        args, results, redis_version=redis_version, sides=described, idle_cpu_ms_per_s=idle
    )
    if any(r["failures"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main())
