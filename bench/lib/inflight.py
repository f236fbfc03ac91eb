"""Background load for ``cost_growth.py``: ``count`` long runs kept in flight, each followed by
one SSE client, from a process of its own so the benchmark's probe client has its event loop
(and its receive timestamps) to itself.

The child (``python -m bench.lib.inflight SPEC``, SPEC a JSON object: ``base``, ``count``, ``text``,
``follow``, ``posters``) posts ``count`` runs with ``posters`` concurrent POSTs, opens one
``GET /v1/runs/{id}/events`` per run when ``follow`` is set, prints one JSON line when every run
is posted and every stream open (``ready``), then reads its stdin to EOF, closes everything and
prints a last JSON line (``done``: frames received, streams that ended early, errors).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from typing import Any

from bench.lib.traffic import client_session, post_run
from tests.support.polling import NeverHeld, eventually
from tests.support.processes import REPO_ROOT, child_env

MODULE = "bench.lib.inflight"


async def child(spec: dict[str, Any]) -> None:
    base, count, text = spec["base"], int(spec["count"]), spec["text"]
    frames = opened = ended = 0
    errors: list[str] = []
    run_ids: list[str] = []

    async def follow(session: Any, run_id: str) -> None:
        nonlocal frames, opened, ended
        try:
            async with session.get(f"{base}/v1/runs/{run_id}/events") as response:
                if response.status != 200:
                    raise RuntimeError(f"events answered {response.status}")
                opened += 1
                async for chunk in response.content.iter_any():
                    frames += chunk.count(b"data: ")
            ended += 1  # the run ended (or the API closed the stream) while we followed it
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            errors.append(repr(exc)[:200])

    started = time.monotonic()
    async with client_session(limit=count + 64) as session:
        followers: list[asyncio.Task[None]] = []
        remaining = count

        async def poster() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                try:
                    run_id = await post_run(session, base, text)
                except Exception as exc:
                    errors.append(repr(exc)[:200])
                    continue
                run_ids.append(run_id)
                if spec["follow"]:
                    followers.append(asyncio.create_task(follow(session, run_id)))

        await asyncio.gather(*(poster() for _ in range(int(spec["posters"]))))
        posted_s = time.monotonic() - started
        if spec["follow"]:
            with contextlib.suppress(NeverHeld):  # ready reports how many opened
                await eventually(lambda: opened + len(errors) >= count, within=60)
        ready = {"ready": True, "posted": len(run_ids), "opened": opened, "errors": len(errors)}
        print(json.dumps({**ready, "post_s": round(posted_s, 3)}), flush=True)
        frames_at_ready, ready_at = frames, time.monotonic()

        await asyncio.to_thread(sys.stdin.read)  # until the parent closes our stdin
        window = time.monotonic() - ready_at
        received = frames - frames_at_ready
        for task in followers:
            task.cancel()
        await asyncio.gather(*followers, return_exceptions=True)
    done = {
        "done": True,
        "frames": frames,
        "frames_per_s": round(received / window, 1) if window > 0 else 0.0,
        "ended_early": ended,
        "errors": len(errors),
        "error_samples": errors[:3],
    }
    print(json.dumps(done), flush=True)


class InflightLoad:
    """The parent's handle on the child: ``await start()`` returns its ``ready`` line,
    ``await stop()`` its ``done`` line (or what went wrong). Every wait is bounded."""

    def __init__(self, base: str, count: int, text: str, *, follow: bool = True) -> None:
        self.spec = {"base": base, "count": count, "text": text, "follow": follow, "posters": 32}
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, limit_s: float) -> dict[str, Any]:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            MODULE,
            json.dumps(self.spec),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=REPO_ROOT,
            env=child_env(),
        )
        return await self._line(limit_s)

    async def _line(self, limit_s: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), limit_s)
        if not line:
            raise RuntimeError(f"background load exited ({await self.proc.wait()})")
        return dict(json.loads(line))

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def stop(self, limit_s: float = 30.0) -> dict[str, Any]:
        if self.proc is None or self.proc.returncode is not None:
            return {"done": False}
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            result = await self._line(limit_s)
            await asyncio.wait_for(self.proc.wait(), limit_s)
        except (TimeoutError, RuntimeError, json.JSONDecodeError) as exc:
            self.proc.kill()
            await self.proc.wait()
            return {"done": False, "error": repr(exc)[:200]}
        return result


if __name__ == "__main__":
    asyncio.run(child(json.loads(sys.argv[1])))
