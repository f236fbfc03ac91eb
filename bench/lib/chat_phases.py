"""The two measured phases of ``bench/hermes_vs_upstream.py`` on one side (a server under
test, ``sides.py``), every turn the same streaming ``POST /v1/chat/completions`` on a new
session and checked (HTTP 200, exactly the fake LLM's reply, ``[DONE]``): time to first token
(one client, sequential turns) and throughput (closed-loop clients over a window of whole
generations of turns), with the warm-up before them and the CPU readings around the window.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from bench.lib import report, traffic
from bench.lib.sides import SESSION_HEADER, Side
from tests.support.fake_llm import FIXED_MARKER, FIXED_WORDS

EXPECTED_REPLY = "".join([*FIXED_WORDS, f"{FIXED_MARKER}1"])  # one user message
PROMPT = "Please answer briefly."
BUCKET_S = 5.0  # the throughput timeline's resolution


@dataclass
class Turn:
    sent: float
    first: float | None
    end: float
    problem: str | None


async def stream_turn(session: aiohttp.ClientSession, base: str, tag: str) -> Turn:
    body = {"messages": [{"role": "user", "content": PROMPT}], "stream": True}
    headers = {SESSION_HEADER: f"{tag}-{uuid.uuid4().hex[:12]}"}
    first: float | None = None
    problem: str | None = None
    sent = time.monotonic()
    try:
        async with session.post(base + "/v1/chat/completions", json=body, headers=headers) as r:
            if r.status != 200:
                problem = f"HTTP {r.status}: {(await r.text())[:200]}"
            else:
                reply = await traffic.read_stream_reply(r)
                first = reply.first_content_at
                if reply.text != EXPECTED_REPLY:
                    problem = f"reply {reply.text[-60:]!r} is not the fake's {EXPECTED_REPLY!r}"
                elif not reply.done:
                    problem = "stream ended without [DONE]"
    except Exception as exc:  # a failed turn (timeout included), not a crashed benchmark
        problem = repr(exc)[:200] or type(exc).__name__
    return Turn(sent, first, time.monotonic(), problem)


def client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def machine_cpu() -> float:
    """Busy CPU seconds of the whole machine, every core and process (``/proc/stat``): with the
    sides' own figures it tells how much of the 2 cores anything else took."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return float("nan")
    ticks = [int(v) for v in first[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


async def ttft_phase(side: Side, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    """One client, sequential turns: time to first token and total time."""
    warm: list[Turn] = []
    turns: list[Turn] = []
    async with traffic.client_session(limit=4, timeout=args.turn_timeout) as session:
        for _ in range(args.ttft_warmup):
            warm.append(await stream_turn(session, side.base, tag + "-warm"))
        for _ in range(args.ttft_turns):
            turns.append(await stream_turn(session, side.base, tag))
    good = [t for t in turns if t.problem is None and t.first is not None]
    samples = [t.first - t.sent for t in good if t.first is not None]
    return {
        "turns": len(turns),
        "ok": len(good),
        "failures": [t.problem for t in warm + turns if t.problem is not None],
        "ttft_ms": report.summary_ms(samples),
        "samples_ms": [round(v * 1000, 1) for v in samples],
        "total_ms": report.summary_ms([t.end - t.sent for t in good]),
    }


@dataclass
class Window:
    """What a closed loop's clients did around its measured window: every turn, when the
    clients started, the window's ends as the waits saw them (``c0``, ``c1``) and as the goals
    were reached, the CPU readings at both ends, and the turns still running after it."""

    turns: list[Turn]
    started: float
    c0: float
    c1: float
    reached: tuple[bool, bool]
    cpu: tuple[dict[str, float], dict[str, float]]
    client_cpu: tuple[float, float]
    llm_cpu: tuple[float, float]
    machine_cpu: tuple[float, float]
    drain_s: float
    stuck: int


async def closed_loop(
    side: Side, args: argparse.Namespace, llm: psutil.Process, tag: str
) -> Window:
    """``args.clients`` closed-loop clients until the ``ramp_turns + window_turns``-th turn (or
    the waits' bounds), then every turn in flight finished (bounded)."""
    turns: list[Turn] = []
    goals = [args.ramp_turns, args.ramp_turns + args.window_turns]
    reached = [asyncio.Event(), asyncio.Event()]
    stop = False

    async def client(session: aiohttp.ClientSession) -> None:
        while not stop:
            turns.append(await stream_turn(session, side.base, tag))
            for goal, event in zip(goals, reached, strict=True):
                if len(turns) >= goal:
                    event.set()

    async def reach(index: int, limit: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reached[index].wait(), limit)
        return reached[index].is_set()

    def readings() -> tuple[float, dict[str, float], float, float, float]:
        return time.monotonic(), side.cpu(), client_cpu(), report.tree_cpu(llm), machine_cpu()

    session = traffic.client_session(limit=args.clients + 4, timeout=args.turn_timeout)
    started = time.monotonic()
    tasks = [asyncio.ensure_future(client(session)) for _ in range(args.clients)]
    try:
        ramp_reached = await reach(0, args.ramp_limit)
        first = readings()
        window_reached = await reach(1, args.window_limit)
        last = readings()
        stop = True
        _, stuck = await asyncio.wait(tasks, timeout=args.turn_timeout + 10)
        drain_s = time.monotonic() - last[0]
        for task in stuck:  # cannot happen while aiohttp honours the turn timeout
            task.cancel()
        if stuck:
            await asyncio.wait(stuck, timeout=10)
    finally:
        stop = True
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await session.close()
    return Window(
        turns,
        started,
        first[0],
        last[0],
        (ramp_reached, window_reached),
        (first[1], last[1]),
        (first[2], last[2]),
        (first[3], last[3]),
        (first[4], last[4]),
        drain_s,
        len(stuck),
    )


async def throughput_phase(
    side: Side, args: argparse.Namespace, llm: psutil.Process, tag: str
) -> dict[str, Any]:
    """``args.clients`` closed-loop clients. The window runs from the ``ramp_turns``-th finished
    turn to the ``ramp_turns + window_turns``-th: whole generations of a closed loop, so a side
    that finishes its turns in waves (upstream does) is measured over whole waves."""
    w = await closed_loop(side, args, llm, tag)
    turns, started, c0, c1 = w.turns, w.started, w.c0, w.c1
    goals = [args.ramp_turns, args.ramp_turns + args.window_turns]
    ends = sorted(t.end for t in turns)
    # A side that never reached a goal is measured from/to when the wait gave up, and says so.
    t0 = ends[goals[0] - 1] if w.reached[0] else c0
    t1 = ends[goals[1] - 1] if w.reached[1] else c1
    ok = [t for t in turns if t0 < t.end <= t1 and t.problem is None]
    in_cpu_window = max(sum(1 for t in turns if c0 < t.end <= c1 and t.problem is None), 1)
    cpu = {k: w.cpu[1][k] - w.cpu[0][k] for k in w.cpu[0]}
    timeline = [0] * (int(((ends[-1] if ends else started) - started) // BUCKET_S) + 1)
    for t in turns:
        timeline[int((t.end - started) // BUCKET_S)] += 1
    return {
        "ramp_s": round(t0 - started, 2),
        "window_s": round(t1 - t0, 2),
        "drain_s": round(w.drain_s, 2),
        "turns_total": len(turns),
        "ok_in_window": len(ok),
        "failures": window_failures(w, goals, args),
        "runs_per_s": round(len(ok) / (t1 - t0), 2) if t1 > t0 else 0.0,
        "ttft_ms": report.summary_ms([t.first - t.sent for t in ok if t.first is not None]),
        "total_ms": report.summary_ms([t.end - t.sent for t in ok]),
        "server_cpu_ms_per_turn": round(sum(cpu.values()) * 1000 / in_cpu_window, 1),
        "server_cpu_by_process": {k: round(v * 1000 / in_cpu_window, 1) for k, v in cpu.items()},
        "server_cpu_cores": round(sum(cpu.values()) / (c1 - c0), 2),
        "client_cpu_ms_per_turn": round(_spent(w.client_cpu) * 1000 / in_cpu_window, 1),
        "llm_cpu_ms_per_turn": round(_spent(w.llm_cpu) * 1000 / in_cpu_window, 1),
        # everything on the machine (all sides, client, fake LLM, other users), in cores
        "machine_cpu_cores": round(_spent(w.machine_cpu) / (c1 - c0), 2),
        # turns finished per BUCKET_S seconds since the clients started (ramp, window, drain)
        "timeline": timeline,
        "window_buckets": [int((t0 - started) // BUCKET_S), int((t1 - started) // BUCKET_S)],
    }


def _spent(readings: tuple[float, float]) -> float:
    return readings[1] - readings[0]


def window_failures(w: Window, goals: list[int], args: argparse.Namespace) -> list[str]:
    """Every failed turn's problem, the clients still in a turn after the window, a stall."""
    failures = [t.problem for t in w.turns if t.problem is not None]
    if w.stuck:
        failures.append(f"{w.stuck} client(s) still in a turn {w.drain_s:.0f} s after the window")
    if not all(w.reached):
        failures.append(
            f"stalled: {len(w.turns)} turns done, wanted {goals[0]} within {args.ramp_limit:g} s "
            f"and {goals[1]} within a further {args.window_limit:g} s"
        )
    return failures


async def warm_up(side: Side, args: argparse.Namespace) -> None:
    """A concurrent burst (so every worker builds its first agent and imports what it needs),
    then a few sequential turns."""
    async with traffic.client_session(limit=args.warmup_burst + 4, timeout=args.turn_timeout) as s:
        burst = await asyncio.gather(
            *(stream_turn(s, side.base, "warm") for _ in range(args.warmup_burst))
        )
        for _ in range(3):
            burst.append(await stream_turn(s, side.base, "warm"))
    problems = [t.problem for t in burst if t.problem is not None]
    if problems:
        raise RuntimeError(f"{side.name} warm-up failed: {problems[:3]}")
