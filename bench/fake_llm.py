"""A deterministic OpenAI-compatible LLM for benchmarks, run in a process of its own so its CPU is
never counted as a server's.

``POST /v1/chat/completions`` answers every request with the same 20-token reply (19 fixed words,
then ``MARKER`` + the number of user messages in the request), streamed as
``chat.completion.chunk`` SSE (``token_delay`` seconds apart, a usage chunk when
``stream_options.include_usage``, then ``[DONE]``) or as one ``chat.completion`` when ``stream``
is false; it never calls a tool. ``GET /v1/models`` lists ``MODEL``. ``GET /_stats`` returns the
requests seen per path (and chat requests per tool set offered, ``tools=N:<hash>``), so a
benchmark can tell how many model calls a turn made and with which tool set. Any other path
answers 404 (and is counted).

    python bench/fake_llm.py --port 0 [--token-delay 0]   # prints "FAKE_LLM_READY <port>"

Benchmarks use ``FakeLLMProcess``; nothing here imports from ``tests/``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

MODEL = "bench-model"
# 20 tokens; the last one is the marker a benchmark looks for in every answer, followed by the
# number of user messages the request carried (so a client can tell the server sent the
# conversation's history along): "... BENCH-REPLY-OK-u3" for the third turn of a conversation.
MARKER = "BENCH-REPLY-OK-u"
TOKENS = [f"w{i} " for i in range(19)]
API_KEY = "bench-llm-key"


def reply_tokens(body: dict[str, Any]) -> list[str]:
    users = sum(1 for m in body.get("messages") or [] if m.get("role") == "user")
    return [*TOKENS, f"{MARKER}{users}"]


def tool_set(body: dict[str, Any]) -> str:
    """``tools=N:<hash of the names>``: which tools the agent offered the model."""
    names = sorted(
        str((tool.get("function") or {}).get("name")) for tool in body.get("tools") or []
    )
    digest = hashlib.sha256(",".join(names).encode()).hexdigest()[:8]
    return f"tools={len(names)}:{digest}"


def _usage(body: dict[str, Any]) -> dict[str, int]:
    prompt = sum(len(json.dumps(m)) // 4 for m in body.get("messages") or [])
    return {
        "prompt_tokens": prompt,
        "completion_tokens": len(TOKENS) + 1,
        "total_tokens": prompt + len(TOKENS) + 1,
    }


def _chunk(cid: str, model: str, delta: dict[str, Any], finish: str | None) -> bytes:
    payload = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


class FakeLLM:
    def __init__(self, token_delay: float = 0.0, log: str = "") -> None:
        self.token_delay = token_delay
        self.requests: Counter[str] = Counter()
        self.log = open(log, "a", buffering=1) if log else None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/version", self.version)
        app.router.add_get("/_stats", self.stats)
        app.router.add_route("*", "/{tail:.*}", self.other)
        return app

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.requests[request.path] += 1
        body = await request.json()
        self.requests[tool_set(body)] += 1
        model = str(body.get("model") or MODEL)
        cid = "chatcmpl-" + uuid.uuid4().hex[:24]
        tokens = reply_tokens(body)
        if self.log is not None:
            messages = body.get("messages") or []
            roles = "".join((m.get("role") or "?")[0] for m in messages)
            last = str(messages[-1].get("content"))[:80] if messages else ""
            tools = ",".join(
                sorted(str((t.get("function") or {}).get("name")) for t in body.get("tools") or [])
            )
            print(
                f"stream={bool(body.get('stream'))} roles={roles} tools={tools} last={last!r}",
                file=self.log,
            )
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "".join(tokens)},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": _usage(body),
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(_chunk(cid, model, {"role": "assistant", "content": ""}, None))
        for token in tokens:
            if self.token_delay:
                await asyncio.sleep(self.token_delay)
            await response.write(_chunk(cid, model, {"content": token}, None))
        tail = _chunk(cid, model, {}, "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [],
                "usage": _usage(body),
            }
            tail += b"data: " + json.dumps(usage).encode() + b"\n\n"
        await response.write(tail + b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def models(self, request: web.Request) -> web.Response:
        self.requests[request.path] += 1
        return web.json_response(
            {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench"}]}
        )

    async def version(self, request: web.Request) -> web.Response:
        # Answer like vLLM: Hermes probes a loopback endpoint for its server type on every agent
        # it builds until one probe succeeds, then caches the answer for an hour. A fake that
        # matched no server type would make every turn pay five extra HTTP requests, which no
        # real local server (vLLM, llama.cpp, Ollama, LM Studio) causes.
        self.requests[f"{request.method} {request.path}"] += 1
        return web.json_response({"version": "0.0.0-bench"})

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response(dict(self.requests))

    async def other(self, request: web.Request) -> web.Response:
        self.requests[f"{request.method} {request.path}"] += 1
        return web.json_response({"error": {"message": "not found"}}, status=404)


class FakeLLMProcess:
    """Runs this module as a subprocess on a free loopback port; ``base_url`` ends in ``/v1``."""

    def __init__(self, token_delay: float = 0.0, log: str = "") -> None:
        command = [sys.executable, str(Path(__file__).resolve()), "--port", "0"]
        command += ["--token-delay", str(token_delay), "--log", log]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if not line.startswith("FAKE_LLM_READY "):
            self.proc.kill()
            raise RuntimeError(f"fake LLM did not start: {line!r}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.base_url = self.url + "/v1"

    async def stats(self) -> dict[str, int]:
        async with aiohttp.ClientSession() as session, session.get(self.url + "/_stats") as r:
            return dict(await r.json())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


async def _serve(port: int, token_delay: float, log: str) -> None:
    runner = web.AppRunner(FakeLLM(token_delay, log).app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)
    await site.start()
    sockets = getattr(site._server, "sockets", None) or []  # the port the OS picked
    print(f"FAKE_LLM_READY {sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token-delay", type=float, default=0.0)
    parser.add_argument("--log", default="", help="append one line per chat request to this file")
    args = parser.parse_args()
    try:
        asyncio.run(_serve(args.port, args.token_delay, args.log))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
