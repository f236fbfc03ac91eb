"""The client side of a benchmark, over HTTP: sessions with the bench key, runs and their SSE,
chat completion streams and session chat stream turns."""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from bench.lib.deploy import API_KEY
from tests.support.fake_llm import FIXED_MARKER

PROMPT = "Turn {index}: please answer briefly."


def raise_nofile(wanted: int) -> int:
    """Raise this process's open-file limit to ``wanted`` (within the hard limit); the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(max(soft, wanted), hard) if hard != resource.RLIM_INFINITY else max(soft, wanted)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def client_session(limit: int = 0, timeout: float | None = None) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, force_close=False),
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=aiohttp.ClientTimeout(total=timeout, sock_read=None),
    )


def words(count: int) -> str:
    """An echo input of ``count`` words: the reply is "Echo:" + these, count + 1 deltas."""
    return " ".join(f"w{i}" for i in range(count))


async def post_run(session: aiohttp.ClientSession, base: str, text: str) -> str:
    async with session.post(base + "/v1/runs", json={"input": text}) as response:
        if response.status != 202:
            raise RuntimeError(f"POST /v1/runs answered {response.status}: {await response.text()}")
        return str((await response.json())["run_id"])


async def read_events(
    session: aiohttp.ClientSession,
    base: str,
    run_id: str,
    on_event: Callable[[dict[str, Any], float], Awaitable[None] | None] | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Read a run's SSE to ``: stream closed``; (events, closed cleanly). ``on_event`` gets each
    decoded payload with its receive time (``time.time()``, comparable to event timestamps)."""
    events: list[dict[str, Any]] = []
    closed = False
    async with session.get(f"{base}/v1/runs/{run_id}/events") as response:
        if response.status != 200:
            raise RuntimeError(f"events answered {response.status}")
        async for raw in response.content:
            line = raw.rstrip(b"\n")
            if line.startswith(b"data: "):
                now = time.time()
                payload = json.loads(line[6:])
                events.append(payload)
                if on_event is not None:
                    result = on_event(payload, now)
                    if result is not None:
                        await result
            elif line == b": stream closed":
                closed = True
                break
    return events, closed


@dataclass
class StreamReply:
    """What a streaming chat completion delivered."""

    text: str
    first_content_at: float | None  # time.monotonic() when the first non-empty content arrived
    done: bool  # ``data: [DONE]`` was received


async def read_stream_reply(response: aiohttp.ClientResponse) -> StreamReply:
    text: list[str] = []
    first: float | None = None
    async for raw in response.content:
        line = raw.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            return StreamReply("".join(text), first, True)
        chunk = json.loads(data)
        for choice in chunk.get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if isinstance(content, str):
                if first is None and content:
                    first = time.monotonic()
                text.append(content)
    return StreamReply("".join(text), first, False)


# -- session chat streams ------------------------------------------------------------------------
async def create_sessions(base: str, count: int) -> list[str]:
    async with client_session(limit=8, timeout=60) as session:
        ids = []
        for _ in range(count):
            async with session.post(base + "/api/sessions", json={}) as r:
                if r.status != 201:
                    raise RuntimeError(f"POST /api/sessions answered {r.status}")
                ids.append(str((await r.json())["session"]["id"]))
        return ids


async def stream_turn(
    session: aiohttp.ClientSession, base: str, session_id: str, index: int
) -> tuple[float, float]:
    """Turn ``index`` of a session chat stream: (TTFT, total) in seconds; raises on anything
    but the fake LLM's full reply for that turn and ``done``."""
    url = f"{base}/api/sessions/{session_id}/chat/stream"
    sent = time.perf_counter()
    first: float | None = None
    text: list[str] = []
    event = ""
    async with session.post(url, json={"message": PROMPT.format(index=index)}) as r:
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {(await r.text())[:200]}")
        async for raw in r.content:
            line = raw.rstrip(b"\n")
            if line.startswith(b"event: "):
                event = line[7:].decode()
                if event == "done":
                    break
            elif line.startswith(b"data: ") and event == "assistant.delta":
                if first is None:
                    first = time.perf_counter()
                text.append(str(json.loads(line[6:]).get("delta") or ""))
        else:
            raise RuntimeError("stream ended without done")
    reply = "".join(text)
    if not reply.rstrip().endswith(f"{FIXED_MARKER}{index}"):
        raise RuntimeError(f"turn {index}: reply {reply[-60:]!r}")
    ended = time.perf_counter()
    return (first or ended) - sent, ended - sent
