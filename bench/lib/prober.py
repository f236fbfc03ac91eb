"""URLs polled from a separate process while a benchmark runs: each request on a new connection,
as a new client would, so the benchmark client's own busy event loop does not inflate the
figures."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from bench.lib.deploy import API_KEY
from bench.lib.report import summary_ms

_PROBER = """
import json, sys, threading, time, urllib.request
spec = json.loads(sys.argv[1])
until = time.monotonic() + spec["max_seconds"]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
out = {name: {"ok": [], "errors": 0, "samples": []} for name in spec["urls"]}

def poll(name, url):
    record = out[name]
    while not done.is_set() and time.monotonic() < until:
        t = time.monotonic()
        try:
            request = urllib.request.Request(url, headers=spec["headers"])
            with opener.open(request, timeout=spec["timeout"]) as response:
                response.read()
            record["ok"].append(time.monotonic() - t)
        except Exception as exc:
            record["errors"] += 1
            if len(record["samples"]) < 3:
                record["samples"].append(repr(exc)[:200])
        done.wait(spec["interval"])

threads = [threading.Thread(target=poll, args=item) for item in spec["urls"].items()]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps(out))
"""


@dataclass
class ProbeResult:
    """One probed URL: latencies (s) of the requests that answered 2xx, and the failures."""

    latencies: list[float]
    errors: int
    error_samples: list[str]

    def summary(self, limit_s: float = 0.1) -> dict[str, Any]:
        """``summary_ms`` plus failures and how many requests missed ``limit_s`` (failed ones
        count as missed)."""
        over = sum(1 for v in self.latencies if v > limit_s) + self.errors
        return {
            **summary_ms(self.latencies),
            "errors": self.errors,
            f"over_{round(limit_s * 1000)}ms": over,
            "error_samples": self.error_samples,
        }


class Prober:
    """Polls each of ``urls`` (name -> URL) from a separate process, one thread per URL: a
    request, then ``interval`` s of rest, again. Every request opens a new connection (urllib),
    as a new client would, and the benchmark client's own busy event loop does not inflate the
    figures. ``await stop()`` returns a :class:`ProbeResult` per name."""

    def __init__(
        self,
        urls: dict[str, str],
        *,
        interval: float = 0.1,
        timeout: float = 10.0,
        max_seconds: float = 600.0,
        auth: bool = True,
    ) -> None:
        spec = {
            "urls": urls,
            "headers": {"Authorization": f"Bearer {API_KEY}"} if auth else {},
            "interval": interval,
            "timeout": timeout,
            "max_seconds": max_seconds,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _PROBER, json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    async def stop(self) -> dict[str, ProbeResult]:
        try:
            out, _ = await asyncio.to_thread(self.proc.communicate, b"", 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        raw = json.loads(out or b"{}")
        return {
            name: ProbeResult([float(v) for v in r["ok"]], int(r["errors"]), r["samples"])
            for name, r in raw.items()
        }
