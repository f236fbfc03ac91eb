"""Closed-loop echo runs: each client posts a run (``POST /v1/runs``), reads its whole SSE to
``: stream closed``, checks the reply and posts the next; ``throughput`` measures with it and
``redis_cost`` counts Redis commands under it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.lib.report import summary_ms
from bench.lib.traffic import client_session, post_run, read_events, words

INPUT_WORDS = 20


async def level(
    base: str, concurrency: int, runs: int, limit_s: float, input_words: int = INPUT_WORDS
) -> dict[str, Any]:
    """``runs`` echo runs of ``input_words`` words (``input_words`` + 1 tokens each)."""
    text = words(input_words)
    expected_reply = "Echo: " + text
    ttft: list[float] = []
    total: list[float] = []
    failures: list[str] = []
    deltas = 0  # tokens streamed (the replies' tokens, however they were framed)
    frames = 0  # message.delta frames received
    remaining = runs

    async def client(session: Any) -> None:
        nonlocal remaining, deltas, frames
        while remaining > 0:
            remaining -= 1
            first: list[float] = []

            def on_event(payload: dict[str, Any], now: float, first: list[float] = first) -> None:
                if not first and payload.get("event") == "message.delta":
                    first.append(now)

            sent = time.time()
            try:
                run_id = await post_run(session, base, text)
                events, closed = await read_events(session, base, run_id, on_event)
            except Exception as exc:
                failures.append(repr(exc)[:200])
                continue
            done = time.time()
            # Deltas that piled up behind an append in flight arrive merged into one frame: the
            # reply's text is checked, and tokens are counted as the reply's, not as frames.
            reply = "".join(
                str(e.get("delta")) for e in events if e.get("event") == "message.delta"
            )
            frames += sum(1 for e in events if e.get("event") == "message.delta")
            completed = any(e.get("event") == "run.completed" for e in events)
            if not closed or not completed or reply != expected_reply:
                failures.append(f"closed={closed} completed={completed} reply={reply[-40:]!r}")
                continue
            deltas += input_words + 1
            ttft.append(first[0] - sent)
            total.append(done - sent)

    async with client_session(limit=concurrency + 16) as session:
        started = time.monotonic()
        tasks = [asyncio.create_task(client(session)) for _ in range(concurrency)]
        done, pending = await asyncio.wait(tasks, timeout=limit_s)
        elapsed = time.monotonic() - started
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        if task.exception() is not None:
            failures.append(repr(task.exception())[:200])
    ok = len(total)
    return {
        "runs": runs,
        "ok": ok,
        "failures": runs - ok,  # errors, bad streams, and runs never done in time
        "failure_samples": failures[:3],
        "timed_out": bool(pending),
        "elapsed_s": round(elapsed, 3),
        "runs_per_s": round(ok / elapsed, 1),
        "ttft_ms": summary_ms(ttft),
        "total_ms": summary_ms(total),
        "deltas": deltas,
        "delta_frames": frames,
    }
