"""The benchmark's handle on the raw aiohttp SSE reference (``sse_raw.py``): starts it in a
process of its own (``python -m bench.lib.sse_raw PORT SPEC``) and stops it."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from tests.support.processes import REPO_ROOT, child_env, terminate, wait_http

MODULE = "bench.lib.sse_raw"


class RawSseServer:
    """Starts the reference in its own process and stops it; ``base`` once :meth:`start` ran."""

    def __init__(self, runs: int, delay: float, frames: list[dict[str, Any]]) -> None:
        self.spec = {"runs": runs, "delay": delay, "keepalive": 10.0, "frames": frames}
        self.base = ""
        self.spec_path = ""
        self.popen: subprocess.Popen[bytes] | None = None
        self.proc: psutil.Process | None = None

    def _spawn(self, port: int) -> subprocess.Popen[bytes]:
        spec = tempfile.NamedTemporaryFile("w", suffix=".json", prefix="hq-raw-", delete=False)
        with spec:
            json.dump(self.spec, spec)
        self.spec_path = spec.name
        command = [sys.executable, "-m", MODULE, str(port), spec.name]
        self.popen = subprocess.Popen(command, cwd=REPO_ROOT, env=child_env())
        self.proc = psutil.Process(self.popen.pid)
        self.base = f"http://127.0.0.1:{port}"
        return self.popen

    async def start(self, port: int) -> str:
        popen = self._spawn(port)
        await wait_http(self.base + "/health", popen, "the raw SSE reference server", within=30)
        return self.base

    async def trigger(self) -> None:
        async with aiohttp.ClientSession() as session:
            async with session.post(self.base + "/start") as response:
                if response.status != 200:
                    raise RuntimeError(f"/start answered {response.status}")

    def stop(self) -> None:
        if self.popen is not None:
            terminate(self.popen, 15)
        if self.spec_path:
            Path(self.spec_path).unlink(missing_ok=True)

    def __enter__(self) -> RawSseServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
