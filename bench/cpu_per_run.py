"""Server CPU seconds per agent turn: upstream Hermes (0.19.0) API server against hermes-queue.

Why: upstream runs every turn inside its HTTP process and builds a fresh ``AIAgent`` for each
request; hermes-queue's ``hermes`` backend runs the same agent in a long-lived arq worker that
keeps a session's agent warm between turns. The target (docs/targets.md) is ≤ 0.5 × upstream's CPU
per run. This script measures it on identical HTTP traffic.

How:
- a deterministic fake OpenAI-compatible LLM (``fake_llm.py``) runs in its own process; every
  reply is 20 tokens ending in ``BENCH-REPLY-OK-u<n>``, n = user messages it was sent;
- **upstream**: ``python -m hermes_cli.main gateway run`` (= ``hermes gateway run``) with a
  private ``HERMES_HOME`` whose ``config.yaml`` points the model at the fake (``provider:
  custom``, ``base_url``, a dummy ``api_key``, ``context_length``) and enables only the
  ``api_server`` platform on a free loopback port;
- **hermes-queue**: ``bench/harness.py``'s Deployment (private Redis, ``python -m hermes_queue
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

    python bench/cpu_per_run.py [--quick] [--rounds 3] [--conversations 20 --turns 5]
        [--single 40] [--concurrency 4] [--backend auto|hermes|openai] [--stream]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import fake_llm
import harness
import psutil
import redis

from hermes_queue.agents import known_backends
from hermes_queue.providers import parse_providers
from hermes_queue.redis_server import free_port

LLM_KEY_VAR = "BENCH_FAKE_LLM_KEY"  # not HERMES_QUEUE_*: the harness passes it to workers as is
CONTEXT_LENGTH = 131_072  # pinned, so Hermes never probes the fake for the model's window
SETTLE_S = 0.5
SESSION_HEADER = "X-Hermes-Session-Id"


@dataclass(frozen=True)
class Workload:
    name: str
    conversations: int
    turns: int

    @property
    def total(self) -> int:
        return self.conversations * self.turns


# -- Hermes configuration shared by both sides -----------------------------------------------------
def hermes_config(llm_base_url: str, api_server_port: int | None) -> dict[str, Any]:
    """The ``config.yaml`` both sides' agents read: the fake as a custom endpoint, nothing else
    turned on that config can turn off (no other platform, no kanban dispatcher; external memory
    providers, cron providers and MCP servers are off by default)."""
    config: dict[str, Any] = {
        "model": {
            "default": fake_llm.MODEL,
            "provider": "custom",
            "base_url": llm_base_url,
            "api_key": fake_llm.API_KEY,
            "context_length": CONTEXT_LENGTH,
        },
        "kanban": {"dispatch_in_gateway": False},
    }
    if api_server_port is not None:
        config["platforms"] = {
            "api_server": {
                "enabled": True,
                "extra": {"host": "127.0.0.1", "port": api_server_port, "key": harness.API_KEY},
            }
        }
    return config


def write_hermes_home(prefix: str, config: dict[str, Any]) -> Path:
    home = Path(tempfile.mkdtemp(prefix=prefix))
    # JSON is YAML: no YAML writer needed.
    (home / "config.yaml").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return home


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without Hermes' or hermes-queue's own variables, plus ``extra``."""
    prefixes = ("HERMES_", "API_SERVER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.update(extra, PYTHONUNBUFFERED="1")
    return env


# -- CPU accounting --------------------------------------------------------------------------------
def tree_cpu(proc: psutil.Process) -> float:
    """User + system CPU seconds of ``proc``, its reaped children and its live descendants."""
    try:
        times = proc.cpu_times()
        total = float(times.user + times.system + times.children_user + times.children_system)
        children = proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0.0
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            t = child.cpu_times()
            total += t.user + t.system
    return total


@dataclass
class Side:
    """A server under test: its base URL and how to read each role's CPU seconds."""

    name: str
    base: str
    roles: dict[str, Callable[[], float]]
    describe: dict[str, Any] = field(default_factory=dict)

    def cpu(self) -> dict[str, float]:
        return {role: read() for role, read in self.roles.items()}


def redis_info_cpu(client: redis.Redis) -> Callable[[], float]:
    def read() -> float:
        info: dict[str, Any] = client.info("cpu")  # type: ignore[assignment]  # sync client
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    return read


# -- upstream --------------------------------------------------------------------------------------
class Upstream:
    """hermes-agent's gateway with only the api_server platform, in a private HERMES_HOME."""

    def __init__(self, llm_base_url: str, extra_config: dict[str, Any] | None = None) -> None:
        self.port = free_port()
        config = {**hermes_config(llm_base_url, self.port), **(extra_config or {})}
        self.home = write_hermes_home("hq-bench-upstream-", config)
        self.command = [sys.executable, "-m", "hermes_cli.main", "gateway", "run"]
        self.log = self.home / "gateway-stdout.log"
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(
            self.command,
            env=clean_env(HERMES_HOME=str(self.home)),
            cwd=self.home,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        self.base = f"http://127.0.0.1:{self.port}"

    async def wait_healthy(self, limit_s: float = 90.0) -> None:
        deadline = time.monotonic() + limit_s
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"upstream gateway exited; log in {self.log}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(self.base + "/health") as response:
                        if response.status == 200:
                            return
                await asyncio.sleep(0.2)
        raise RuntimeError(f"upstream gateway never became healthy; log in {self.log}")

    def side(self) -> Side:
        proc = psutil.Process(self.proc.pid)
        return Side(
            "upstream",
            self.base,
            {"gateway": lambda: tree_cpu(proc)},
            {"command": " ".join(self.command[1:]), "hermes_home": str(self.home)},
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log_file.close()


# -- hermes-queue ----------------------------------------------------------------------------------
def pick_backend(requested: str) -> str:
    if requested != "auto":
        return requested
    if "hermes" in known_backends():
        return "hermes"
    print("hermes backend not available yet: measuring the openai backend", flush=True)
    return "openai"


def queue_overrides(
    backend: str,
    llm_base_url: str,
    hermes_home: Path,
    worker_concurrency: int,
    agent_cache_size: int | None = None,
) -> dict[str, Any]:
    """Settings of our deployment; the same as this TOML (see docs/deploy.md)::

    agent_backend = "hermes"            # or "openai"
    default_provider = "fake"
    default_model = "bench-model"
    hermes_home = "<tmp>/hq-bench-queue-home-…"
    hermes_toolsets = []                # upstream's api_server default
    [providers.fake]
    base_url = "http://127.0.0.1:<port>/v1"
    api_key_env = "BENCH_FAKE_LLM_KEY"
    """
    overrides: dict[str, Any] = {
        "agent_backend": backend,
        "providers": parse_providers(
            {"fake": {"base_url": llm_base_url, "api_key_env": LLM_KEY_VAR}}
        ),
        "default_provider": "fake",
        "default_model": fake_llm.MODEL,
        "hermes_home": str(hermes_home),
        "hermes_toolsets": (),
        "worker_concurrency": worker_concurrency,
        "metrics_port": 0,
    }
    if agent_cache_size is not None:
        overrides["hermes_agent_cache_size"] = agent_cache_size
    return overrides


async def start_queue(dep: harness.Deployment, workers: int) -> Side:
    base = await dep.start_api()
    started = await dep.start_workers(workers)
    api = dep.api_procs[0]
    worker_procs = [psutil.Process(w.pid) for w in started]
    roles: dict[str, Callable[[], float]] = {
        "api": lambda: tree_cpu(api),
        "worker": lambda: sum(tree_cpu(p) for p in worker_procs),
    }
    if dep.redis_server is not None:
        redis_proc = psutil.Process(dep.redis_server.process.pid)
        roles["redis"] = lambda: tree_cpu(redis_proc)
    else:  # a shared Redis: INFO cpu counts every client's work, not only ours
        roles["redis"] = redis_info_cpu(dep.redis)
    return Side(
        "hermes-queue",
        base,
        roles,
        {
            "backend": dep.settings.agent_backend,
            "workers": workers,
            "worker_concurrency": dep.settings.worker_concurrency,
            "hermes_agent_cache_size": dep.settings.hermes_agent_cache_size,
            "redis": "private" if dep.redis_server is not None else "shared (INFO cpu)",
        },
    )


# -- the client ------------------------------------------------------------------------------------
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


async def read_stream(response: aiohttp.ClientResponse) -> str:
    return (await read_stream_reply(response)).text


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
            content = await read_stream(r)
        else:
            data = await r.json()
            content = str(((data.get("choices") or [{}])[0].get("message") or {}).get("content"))
        echoed = r.headers.get(SESSION_HEADER)
    expected = f"{fake_llm.MARKER}{index}"
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
    async with harness.client_session(limit=concurrency + 4, timeout=limit_s) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    return {
        "ids": ids,
        "ok": ok,
        "failures": failures,
        "elapsed_s": time.monotonic() - started,
        "latency_ms": harness.summary_ms(latencies),
    }


async def check_transcripts(side: Side, ids: list[str], turns: int) -> list[str]:
    """Each conversation's stored transcript holds exactly ``turns`` user and assistant turns."""
    problems: list[str] = []
    async with harness.client_session(limit=8, timeout=60) as session:
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


async def llm_chat_calls(llm: fake_llm.FakeLLMProcess) -> dict[str, int]:
    """Chat requests so far, in total and per tool set offered (``tools=N:<hash>``)."""
    stats = await llm.stats()
    return {k: v for k, v in stats.items() if k == "/v1/chat/completions" or k.startswith("tools=")}


async def measure(
    side: Side,
    workload: Workload,
    args: argparse.Namespace,
    llm: fake_llm.FakeLLMProcess,
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


async def idle_cpu(side: Side, seconds: float = 3.0) -> dict[str, float]:
    """CPU ms per second of a side doing nothing (background loops), for context."""
    before = side.cpu()
    await asyncio.sleep(seconds)
    after = side.cpu()
    return {role: round((after[role] - before[role]) * 1000 / seconds, 2) for role in before}


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


def med(values: list[float]) -> float:
    return round(statistics.median(values), 2) if values else float("nan")


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
            "wall_s": med([r["wall_s"] for r in rs]),
            "turns_per_s": med([r["turns_per_s"] for r in rs]),
            "latency_p50_ms": med([r["latency_ms"]["p50"] for r in rs]),
            "cpu_ms_per_turn": med([r["cpu_ms_per_turn"] for r in rs]),
            "by_process": " · ".join(
                f"{role} {med([r['cpu_ms_per_turn_by_process'][role] for r in rs])}"
                for role in rs[0]["cpu_ms_per_turn_by_process"]
            ),
            "llm_calls_per_turn": med([r["llm_calls_per_turn"] for r in rs]),
            "tools_offered": " ".join(sorted({t for r in rs for t in r["tool_sets"]})),
        }
        if side == "upstream":
            upstream_cpu[workload] = row["cpu_ms_per_turn"]
        rows.append(row)
    for row in rows:
        base = upstream_cpu.get(row["workload"])
        row["ratio_vs_upstream"] = round(row["cpu_ms_per_turn"] / base, 3) if base else "–"
    return rows


async def main() -> None:
    args = parse_args()
    sides_wanted = {s.strip() for s in args.sides.split(",") if s.strip()}
    workloads = [
        Workload("multi-turn", args.conversations, args.turns),
        Workload("single-turn", args.single, 1),
    ]
    os.environ[LLM_KEY_VAR] = fake_llm.API_KEY  # the workers inherit it
    llm = fake_llm.FakeLLMProcess(token_delay=args.token_delay)
    upstream: Upstream | None = None
    dep: harness.Deployment | None = None
    sides: list[Side] = []
    results: list[dict[str, Any]] = []
    idle: dict[str, dict[str, float]] = {}
    try:
        if "upstream" in sides_wanted:
            upstream = Upstream(llm.base_url)
            await upstream.wait_healthy()
            sides.append(upstream.side())
        if "queue" in sides_wanted:
            backend = pick_backend(args.backend)
            home = write_hermes_home("hq-bench-queue-home-", hermes_config(llm.base_url, None))
            dep = harness.Deployment(
                "cpu",
                overrides=queue_overrides(
                    backend, llm.base_url, home, args.worker_concurrency, args.agent_cache_size
                ),
            )
            sides.append(await start_queue(dep, args.workers))
        for side in sides:
            warm = Workload("warm-up", args.warmup, 2)
            r = await run_workload(side, warm, args.concurrency, args.stream, "warm", args.timeout)
            if r["failures"]:
                raise RuntimeError(f"{side.name} warm-up failed: {r['failures'][:3]}")
            idle[side.name] = await idle_cpu(side)
            print(f"{side.name}: warmed up; idle CPU ms/s {idle[side.name]}", flush=True)
        for index in range(args.rounds):
            for workload in workloads:
                for side in sides:  # interleaved, so drift on the machine hits both sides
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
        described = {side.name: side.describe for side in sides}
        redis_version = dep.redis_version() if dep is not None else ""
    finally:
        if dep is not None:
            dep.stop()
        if upstream is not None:
            upstream.stop()
        llm.stop()

    summary = summarize(results)
    harness.print_table(
        f"server CPU per agent turn (medians of {args.rounds} round(s), concurrency "
        f"{args.concurrency}, {'streaming' if args.stream else 'non-streaming'})",
        list(summary[0].keys()),
        [list(row.values()) for row in summary],
    )
    offered = {row["tools_offered"] for row in summary}
    if len(offered) > 1:
        print(f"\nNOTE: the sides offered the model different tool sets: {sorted(offered)}")
    harness.emit_json(
        "cpu_per_run",
        {
            "machine": harness.machine_facts(),
            "redis_version": redis_version,
            "sides": described,
            "idle_cpu_ms_per_s": idle,
            "params": {
                k: getattr(args, k)
                for k in (
                    "conversations",
                    "turns",
                    "single",
                    "concurrency",
                    "rounds",
                    "stream",
                    "token_delay",
                    "warmup",
                )
            },
            "summary": summary,
            "rounds": results,
        },
    )
    if any(r["failures"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main())
