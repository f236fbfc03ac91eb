"""Shared plumbing for the benchmarks: a private Redis, real API/worker processes, SSE reading,
percentiles and reporting. Benchmarks import this module; nothing here imports from ``tests/``.

A benchmark is run by hand (``python bench/<name>.py [--quick]``); it starts everything it needs
on loopback, uses its own namespace, and stops what it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import aiohttp
import psutil
import redis

from hermes_queue.config import Settings, settings_env
from hermes_queue.keys import Keys
from hermes_queue.redis_server import EmbeddedRedis, free_port, named_or_embedded

API_KEY = "bench-key-" + "x" * 16
BENCH_REDIS_VAR = "HERMES_QUEUE_BENCH_REDIS_URL"


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no data."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summary_ms(values_s: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/max of seconds, in milliseconds (rounded to 0.01 ms)."""
    return {
        "n": len(values_s),
        **{
            name: round(percentile(values_s, q) * 1000, 2)
            for name, q in (("p50", 50), ("p95", 95), ("p99", 99), ("max", 100))
        },
    }


async def wait_until(predicate: Callable[[], bool], limit_s: float, step: float = 0.1) -> bool:
    """Poll ``predicate`` every ``step`` s until it holds (True) or ``limit_s`` passed (False)."""
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(step)
    return True


def raise_nofile(wanted: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(max(soft, wanted), hard) if hard != resource.RLIM_INFINITY else max(soft, wanted)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(c) for c in header], *[[_fmt(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    print(f"\n{title}")
    for index, row in enumerate(cells):
        print("  " + "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        if index == 0:
            print("  " + "  ".join("-" * w for w in widths))


def _fmt(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def emit_json(benchmark: str, result: dict[str, Any]) -> None:
    """The machine-readable line: one JSON object, prefixed so it is easy to grep."""
    line = {"benchmark": benchmark, "python": platform.python_version(), **result}
    print("BENCH_JSON " + json.dumps(line, sort_keys=True), flush=True)


def bench_redis_url() -> contextlib.AbstractContextManager[str]:
    """The Redis a benchmark without a ``Deployment`` talks to: the one
    ``HERMES_QUEUE_BENCH_REDIS_URL`` names, else a bundled server started now, stopped after."""
    return named_or_embedded(BENCH_REDIS_VAR)


@dataclass
class Deployment:
    """A private Redis (unless HERMES_QUEUE_BENCH_REDIS_URL is set) and real hermes-queue
    processes in one fresh namespace, started as ``python -m hermes_queue api|worker``."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    redis_server: EmbeddedRedis | None = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    api_procs: list[psutil.Process] = field(default_factory=list)
    logdir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="hq-bench-"))

    def __post_init__(self) -> None:
        url = os.environ.get(BENCH_REDIS_VAR)
        if not url:
            self.redis_server = EmbeddedRedis.start()
            url = self.redis_server.url
        self.settings = Settings(
            redis_url=url,
            namespace=f"bench-{self.name}-{uuid.uuid4().hex[:8]}",
            api_key=API_KEY,
            log_level="WARNING",
            **self.overrides,
        ).validate()
        self.keys = Keys(self.settings.namespace)
        self.redis = redis.Redis.from_url(url)

    # -- processes ---------------------------------------------------------------------------
    def _spawn(self, role: str, settings: Settings) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_QUEUE_")}
        env.update(settings_env(settings))
        env["PYTHONUNBUFFERED"] = "1"
        log = (Path(self.logdir) / f"{role}-{len(self.procs)}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "hermes_queue", role],
            env=env,
            cwd=self.logdir,  # not the checkout: PYTHONPATH may pin another source tree
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.procs.append(proc)
        return proc

    async def start_api(self, **overrides: Any) -> str:
        port = free_port()
        proc = self._spawn("api", self.settings.replace(port=port, **overrides))
        self.api_procs.append(psutil.Process(proc.pid))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                self._check_alive(proc)
                try:
                    async with session.get(url + "/health") as response:
                        if response.status == 200:
                            return url
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.05)
        raise RuntimeError(f"API at {url} never became healthy; logs in {self.logdir}")

    async def start_workers(
        self, count: int = 1, **overrides: Any
    ) -> list[subprocess.Popen[bytes]]:
        """Start workers and wait until each listens on the wake-up channel."""
        before = self.wake_listeners()
        started = [self._spawn("worker", self.settings.replace(**overrides)) for _ in range(count)]
        deadline = time.monotonic() + 30
        while self.wake_listeners() < before + count:
            for proc in started:
                self._check_alive(proc)
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers never subscribed; logs in {self.logdir}")
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # let the first queue poll and heartbeat pass
        return started

    def wake_listeners(self) -> int:
        counts = cast(list[tuple[bytes, int]], self.redis.pubsub_numsub(self.keys.wake_channel))
        return int(dict(counts)[self.keys.wake_channel.encode()])

    def _check_alive(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is not None:
            raise RuntimeError(f"process {proc.args!r} exited; logs in {self.logdir}")

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.redis.close()
        if self.redis_server is not None:
            self.redis_server.stop()

    # -- Redis-side figures ------------------------------------------------------------------
    def info(self, section: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.redis.info(section))

    def total_commands(self) -> int:
        return int(self.info("stats")["total_commands_processed"])

    def redis_connections_of(self, pid: int) -> int:
        """TCP connections from process ``pid`` to this deployment's Redis port."""
        port = int(self.settings.redis_url.rsplit(":", 1)[1].split("/")[0])
        conns = psutil.Process(pid).net_connections(kind="tcp")
        return sum(1 for c in conns if c.raddr and c.raddr.port == port)

    def redis_used_memory_mib(self) -> float:
        """Redis's ``used_memory`` (its allocator's view of the whole dataset), MiB."""
        return round(int(self.info("memory")["used_memory"]) / 2**20, 2)

    def redis_version(self) -> str:
        return str(self.info("server")["redis_version"])

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- HTTP client side ----------------------------------------------------------------------------
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


def rss_mib(proc: psutil.Process) -> float:
    return round(float(proc.memory_info().rss) / 2**20, 1)


def cpu_s(proc: psutil.Process) -> float:
    """User + system CPU seconds of a process so far."""
    times = proc.cpu_times()
    return float(times.user + times.system)


def machine_facts() -> dict[str, Any]:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "nproc": os.cpu_count(),
        "mem_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu": model,
        "python": platform.python_version(),
    }
