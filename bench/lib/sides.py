"""A server under test and its CPU by role, on the fake LLM: upstream Hermes' own API server
(``hermes gateway run``, started by ``tests.support.upstream``) and hermes-queue (a
``Deployment`` with the ``hermes`` backend, or ``openai``), both reading the same Hermes
``config.yaml``. Used by ``cpu_per_run``, ``hermes_vs_upstream``, ``floor`` and ``cold_worker``."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import redis

from bench.lib.deploy import API_KEY, Deployment
from bench.lib.report import tree_cpu
from hermes_queue.agents import known_backends
from hermes_queue.providers import parse_providers
from tests.support.fake_llm import BENCH_MODEL
from tests.support.fake_llm_process import FakeLLMProcess
from tests.support.upstream import UpstreamGateway, hermes_config, write_hermes_home

LLM_KEY = "bench-llm-key"  # the fake LLM checks none; Hermes wants one
LLM_KEY_VAR = "BENCH_FAKE_LLM_KEY"  # not HERMES_QUEUE_*: workers inherit it as it is
SESSION_HEADER = "X-Hermes-Session-Id"


@dataclass
class Side:
    """A server under test: its base URL and how to read each role's CPU seconds."""

    name: str
    base: str
    roles: dict[str, Callable[[], float]]
    describe: dict[str, Any] = field(default_factory=dict)

    def cpu(self) -> dict[str, float]:
        return {role: read() for role, read in self.roles.items()}


async def idle_cpu(side: Side, seconds: float = 3.0) -> dict[str, float]:
    """CPU ms per second of a side doing nothing (background loops), for context."""
    before = side.cpu()
    await asyncio.sleep(seconds)
    after = side.cpu()
    return {role: round((after[role] - before[role]) * 1000 / seconds, 2) for role in before}


async def warm_sides(
    sides: Sequence[Side], warm_up: Callable[[Side], Awaitable[None]]
) -> dict[str, dict[str, float]]:
    """Each side warmed up by ``warm_up`` (raising what failed), then its idle CPU ms/s."""
    idle: dict[str, dict[str, float]] = {}
    for side in sides:
        await warm_up(side)
        idle[side.name] = await idle_cpu(side)
        print(f"{side.name}: warmed up; idle CPU ms/s {idle[side.name]}", flush=True)
    return idle


def redis_info_cpu(client: redis.Redis) -> Callable[[], float]:
    def read() -> float:
        info: dict[str, Any] = client.info("cpu")  # type: ignore[assignment]  # sync client
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    return read


def hermes_home(llm_base_url: str, prefix: str) -> Path:
    """A new ``HERMES_HOME`` whose ``config.yaml`` points the model at the fake LLM."""
    config = hermes_config(llm_base_url, LLM_KEY, BENCH_MODEL)
    return write_hermes_home(Path(tempfile.mkdtemp(prefix=prefix)), config)


# -- upstream --------------------------------------------------------------------------------------
def start_upstream(
    llm_base_url: str, extra_config: dict[str, Any] | None = None
) -> UpstreamGateway:
    """hermes-agent's gateway with only the api_server platform (the bench key), in a private
    ``HERMES_HOME``; ``await gateway.wait_ready()`` before use, ``gateway.stop()`` after."""
    home = Path(tempfile.mkdtemp(prefix="hq-bench-upstream-"))
    return UpstreamGateway(
        llm_base_url,
        home,
        llm_key=LLM_KEY,
        model=BENCH_MODEL,
        api_key=API_KEY,
        extra_config=extra_config,
    )


def upstream_side(gateway: UpstreamGateway) -> Side:
    proc = psutil.Process(gateway.proc.pid)
    return Side(
        "upstream",
        gateway.base_url,
        {"gateway": lambda: tree_cpu(proc)},
        {"command": " ".join(gateway.command[1:]), "hermes_home": str(gateway.home)},
    )


# -- hermes-queue ----------------------------------------------------------------------------------
def pick_backend(requested: str) -> str:
    if requested != "auto":
        return requested
    if "hermes" in known_backends():
        return "hermes"
    print("hermes backend not available yet: measuring the openai backend", flush=True)
    return "openai"


def start_fake_llm(token_delay: float) -> FakeLLMProcess:
    """The fake LLM in a process of its own; its key in ``LLM_KEY_VAR``, which the workers
    started from now on inherit."""
    os.environ[LLM_KEY_VAR] = LLM_KEY
    return FakeLLMProcess(token_delay=token_delay)


def queue_deployment(
    name: str,
    llm_base_url: str,
    worker_concurrency: int,
    *,
    backend: str = "hermes",
    agent_cache_size: int | None = None,
    **settings: Any,
) -> Deployment:
    """A deployment (not started yet) of hermes-queue on the fake LLM, in a ``HERMES_HOME`` of
    its own; ``settings``: more overrides."""
    home = hermes_home(llm_base_url, f"hq-bench-{name}-home-")
    overrides = queue_overrides(backend, llm_base_url, home, worker_concurrency, agent_cache_size)
    return Deployment(name, overrides={**overrides, **settings})


def queue_overrides(
    backend: str,
    llm_base_url: str,
    home: Path,
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
        "default_model": BENCH_MODEL,
        "hermes_home": str(home),
        "hermes_toolsets": (),
        "worker_concurrency": worker_concurrency,
        "metrics_port": 0,
    }
    if agent_cache_size is not None:
        overrides["hermes_agent_cache_size"] = agent_cache_size
    return overrides


@dataclass
class Started:
    """What :func:`start_sides` started, to stop when the benchmark ends."""

    upstreams: list[UpstreamGateway] = field(default_factory=list)
    deployments: list[Deployment] = field(default_factory=list)

    def stop(self) -> None:
        for dep in self.deployments:
            dep.stop()
        for gateway in self.upstreams:
            gateway.stop()


async def start_sides(
    wanted: Collection[str],
    llm_base_url: str,
    started: Started,
    *,
    backend: str,
    worker_counts: Sequence[int],
    worker_concurrency: int,
    agent_cache_size: int | None = None,
    upstream_config: dict[str, Any] | None = None,
    queue_name: str = "hermes-queue",
) -> list[Side]:
    """Upstream's gateway (when ``"upstream"`` is wanted, with ``upstream_config`` in its
    ``config.yaml``) and a hermes-queue deployment per worker count (when ``"queue"`` is), each
    answering and noted in ``started`` before it is awaited. ``queue_name`` names a deployment's
    side (``{workers}``: its worker count)."""
    sides: list[Side] = []
    if "upstream" in wanted:
        gateway = start_upstream(llm_base_url, upstream_config)
        started.upstreams.append(gateway)
        await gateway.wait_ready()
        sides.append(upstream_side(gateway))
    if "queue" in wanted:
        chosen = pick_backend(backend)
        for workers in worker_counts:
            dep = queue_deployment(
                f"queue{workers}",
                llm_base_url,
                worker_concurrency,
                backend=chosen,
                agent_cache_size=agent_cache_size,
            )
            started.deployments.append(dep)
            side = await start_queue(dep, workers)
            side.name = queue_name.format(workers=workers)
            sides.append(side)
    return sides


async def start_queue(dep: Deployment, workers: int) -> Side:
    """One API and ``workers`` workers of ``dep``; the side, with Redis's CPU as a role."""
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
            "backend": dep.settings.agents.backend,
            "workers": workers,
            "worker_concurrency": dep.settings.worker.concurrency,
            "hermes_agent_cache_size": dep.settings.agents.hermes_agent_cache_size,
            "redis": "private" if dep.redis_server is not None else "shared (INFO cpu)",
        },
    )
