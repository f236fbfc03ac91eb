"""The raw aiohttp SSE reference for ``sse_fanout.py``: what a plain aiohttp SSE endpoint costs
with nothing behind it (no Redis, no worker, no middlewares).

The server process (``python -m bench.lib.sse_raw PORT SPEC``) serves ``GET /runs/{r}/events`` for
``runs`` fake runs. A client subscribes (one unbounded ``asyncio.Queue`` per client, like the
hub's per-subscriber queue) and waits. ``POST /start`` starts one in-process ticker that plays
every run's frames on the same schedule as the echo backend (one ``message.delta`` every
``delay`` s, the terminal frame right after the last delta; run r starts ``r × delay / runs`` s
after run 0, so the runs are not in lockstep). Each frame is rendered once (fresh ``id:``,
``run_id``, ``timestamp``, the template's other fields) and the same bytes are put on every
subscriber's queue, as hermes-queue's hub hands one ``XREAD`` to many subscribers and renders an
event once per process. A handler writes everything its queue holds in one write, ends the body
with ``: stream closed`` in the same write as the terminal frame, and sends ``: keepalive``
after ``keepalive`` s of silence: the same batching and framing as ``hermes_queue/api/feed.py``
and ``api/http/sse.py``.
``GET /health`` answers a small JSON body. This module imports nothing but aiohttp, so the
reference carries nothing else; ``raw_sse.py`` starts it.

The spec file (JSON): ``{"runs": int, "delay": float, "keepalive": float, "frames": [payload,
...]}``; ``frames`` are one real run's decoded ``data:`` payloads, so frame sizes match.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from aiohttp import web

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
STREAM_CLOSED = b": stream closed\n\n"
KEEPALIVE = b": keepalive\n\n"
_to_json = json.JSONEncoder(ensure_ascii=False).encode

Item = tuple[bytes, bool]  # (frame bytes, terminal)


class Reference:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.runs = int(spec["runs"])
        self.delay = float(spec["delay"])
        self.keepalive = float(spec["keepalive"])
        self.frames: list[dict[str, Any]] = spec["frames"]
        self.run_ids = [f"run_{uuid.uuid4().hex}" for _ in range(self.runs)]
        self.subscribers: list[set[asyncio.Queue[Item]]] = [set() for _ in range(self.runs)]
        self.ticker: asyncio.Task[None] | None = None

    def schedule(self, start: float) -> list[tuple[float, int, int]]:
        """(due time, run, frame index) for every frame of every run, in time order."""
        due = []
        for run in range(self.runs):
            tick = -1
            for index, frame in enumerate(self.frames):
                if frame.get("event") == "message.delta" or tick < 0:
                    tick += 1
                due.append((start + run * self.delay / self.runs + tick * self.delay, run, index))
        return sorted(due)

    async def tick(self) -> None:
        loop = asyncio.get_running_loop()
        seq: dict[tuple[int, int], int] = {}
        for due, run, index in self.schedule(loop.time()):
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            now = time.time()
            ms = int(now * 1000)
            n = seq[(run, ms)] = seq.get((run, ms), -1) + 1
            payload = {**self.frames[index], "run_id": self.run_ids[run], "timestamp": now}
            data = f"id: {ms}-{n}\ndata: {_to_json(payload)}\n\n".encode()
            item = (data, index == len(self.frames) - 1)
            for queue in self.subscribers[run]:
                queue.put_nowait(item)

    async def events(self, request: web.Request) -> web.StreamResponse:
        run = int(request.match_info["run"])
        if not 0 <= run < self.runs:
            raise web.HTTPNotFound()
        response = web.StreamResponse(status=200, headers=SSE_HEADERS)
        await response.prepare(request)
        queue: asyncio.Queue[Item] = asyncio.Queue()
        self.subscribers[run].add(queue)
        try:
            while True:
                try:
                    async with asyncio.timeout(self.keepalive):  # no task per wait, as ours
                        first = await queue.get()
                except TimeoutError:
                    await response.write(KEEPALIVE)
                    continue
                items = [first]
                while not queue.empty():
                    items.append(queue.get_nowait())
                chunk = b"".join(data for data, _ in items)
                if items[-1][1]:
                    await response.write_eof(chunk + STREAM_CLOSED)
                    return response
                await response.write(chunk)
        except (ConnectionResetError, ConnectionError):
            return response
        finally:
            self.subscribers[run].discard(queue)

    async def start(self, request: web.Request) -> web.Response:
        if self.ticker is not None:
            return web.json_response({"error": "already started"}, status=409)
        self.ticker = asyncio.create_task(self.tick())
        return web.json_response({"started": True})

    async def health(self, request: web.Request) -> web.Response:
        subscribers = sum(len(s) for s in self.subscribers)
        return web.json_response({"status": "ok", "subscribers": subscribers})


def build_app(spec: dict[str, Any]) -> web.Application:
    reference = Reference(spec)
    app = web.Application()
    app.router.add_get("/health", reference.health)
    app.router.add_get("/runs/{run}/events", reference.events)
    app.router.add_post("/start", reference.start)
    return app


def serve(port: int, spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    web.run_app(
        build_app(spec),
        host="127.0.0.1",
        port=port,
        access_log=None,
        print=None,
        shutdown_timeout=1.0,
    )


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2])
