"""Rollout figures: every tier restarted under load, one process at a time (issue 30).

HAProxy (Debian's ``haproxy``) in front of two API replicas, health-checking ``GET
/health/ready``; two workers; Redis through Sentinel (a primary, a replica, three Sentinels);
every process on loopback, configured with the ``redis+sentinel://`` URL. Load, all through
HAProxy, from three kinds of clients, ``--clients`` of each, each running turns one after
another (each turn at least ``--turn-seconds`` long, with two tool steps: the echo agent's
``[tool:…]``, ``[slowtool:S]`` and ``[slow:S]`` markers):

* ``openai``: the openai SDK's streaming chat completion, which cannot resume;
* ``session``: a session chat stream (``POST /api/sessions/{id}/chat/stream``), read to its end
  as hermes-webui reads it, without resuming;
* ``runs``: ``POST /v1/runs`` then its events, resuming with ``Last-Event-ID`` after a drop.

Once every client is in its first turn, the rollout: each worker in turn (a new one started,
then SIGTERM to the old one, which hands its turns over at their next step boundary); each API
replica in turn (set to ``drain`` in HAProxy as endpoint removal would, 1 s later SIGTERM, its
exit awaited, a new one started on the same port, back in HAProxy once its readiness passes);
then Redis (the replica restarted, ``hermes-queue redis-switchover`` to it, the old primary
restarted, coming back as a replica). Then the clients finish the turns they are in.

Reported: turns completed and failed, streams cut (a non-resuming stream that ended without
its final frame), per client kind; non-2xx answers; the longest added delay (a turn's length
over the median of all turns); each step's duration (a worker's and an API replica's from
SIGTERM to exit, Redis's from the command to the primary answering). Bounded: each client
stops starting turns once the rollout is over, and after ``--max-turns``; the whole run after
``--deadline`` seconds.

    python -m bench.rollout [--clients 2] [--turn-seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.lib import report
from bench.lib.balancer import Balancer
from bench.lib.rollout_clients import API_KEY, KINDS, Clients, Tally
from hermes_queue.cli.switchover import switchover
from hermes_queue.config import Settings
from hermes_queue.redisio.embedded import free_port
from tests.support.polling import eventually
from tests.support.processes import Cluster, Proc, wait_http
from tests.support.redis_group import Node, SentinelGroup


def turn_text(seconds: float) -> str:
    """An echo turn of at least ``seconds``: ~51 deltas around two tool calls."""
    tool = max(1.0, seconds * 0.3)
    delay = max(0.05, (seconds - 2 * tool) / 51)
    return f"rollout [tool:alpha] [tool:beta] [slowtool:{tool:.1f}] [slow:{delay:.2f}]"


@dataclass
class Step:
    what: str
    seconds: float
    note: str = ""


async def start_api(cluster: Cluster, port: int) -> Proc:
    """An API replica on ``port`` (the balancer's server address), once it is ready."""
    proc = cluster.spawn("api", ["api"], cluster.settings.replace(port=port))
    url = f"http://127.0.0.1:{port}/health/ready"
    await wait_http(url, proc.process, "the API", log=proc.log)
    return proc


async def roll_workers(cluster: Cluster, workers: list[Proc], steps: list[Step]) -> None:
    for old in list(workers):
        new = await cluster.start_worker()
        started = time.monotonic()
        old.process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(old.process.wait, 600)
        steps.append(Step(f"worker {old.process.pid}", time.monotonic() - started, f"exit {code}"))
        workers[workers.index(old)] = new


async def roll_apis(
    cluster: Cluster, apis: list[tuple[int, Proc]], lb: Balancer, steps: list[Step]
) -> None:
    for index, (port, old) in enumerate(list(apis)):
        server = f"api/api{index}"
        lb.admin(f"set server {server} state drain")
        await asyncio.sleep(1.0)  # the endpoint-removal lag the balancer had
        started = time.monotonic()
        old.process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(old.process.wait, 900)
        drained = time.monotonic() - started
        new = await start_api(cluster, port)
        lb.admin(f"set server {server} state ready")
        await eventually(lambda s=f"api{index}": lb.status(s) == "UP", within=30, what="UP")
        steps.append(
            Step(
                f"api {index}", drained, f"exit {code}; back in {time.monotonic() - started:.1f} s"
            )
        )
        apis[index] = (port, new)


async def restart_node(group: SentinelGroup, node: Node) -> None:
    """Stop ``node`` (SIGTERM), wait until the primary sees its replica gone, start it again
    and wait until it is a synced replica."""
    node.stop()
    await eventually(
        lambda: group._replicas_online(group.primary()) < group.replicas,
        within=30,
        what=f"{node.name} seen gone",
        retry_on=(AssertionError,),
    )
    await group.restart(node)


async def roll_redis(group: SentinelGroup, settings: Settings, steps: list[Step]) -> None:
    replica = next(node for node in group.nodes if node is not group.primary())
    started = time.monotonic()
    await restart_node(group, replica)
    steps.append(Step("redis replica restart", time.monotonic() - started))
    started = time.monotonic()
    done = await asyncio.to_thread(
        switchover, settings.redis, replica=None, timeout=30, say=lambda _line: None
    )
    steps.append(
        Step(
            "redis switchover",
            time.monotonic() - started,
            f"writes waited {done.paused_seconds:.2f} s",
        )
    )
    old = next(node for node in group.nodes if (node.host, node.port) == done.old)
    started = time.monotonic()
    await restart_node(group, old)
    steps.append(Step("redis old primary restart", time.monotonic() - started))


def rollout_settings(args: argparse.Namespace, group: SentinelGroup, workdir: Path) -> Settings:
    return Settings.of(
        redis_url=group.url,
        namespace=f"rollout-{uuid.uuid4().hex[:8]}",
        api_key=API_KEY,
        log_level="INFO",
        # With one replica, restarting it (or the old primary) leaves the primary none to
        # acknowledge writes: redis_min_replicas = 1 needs two replicas to roll without a 503.
        redis_min_replicas=0,
        drain_seconds=args.turn_seconds,
        drain_grace_seconds=2.0,
        stream_drain_seconds=args.turn_seconds * 3,
        store_url=f"sqlite:///{workdir}/store.db",
    ).validate()


async def start_tiers(
    cluster: Cluster, workdir: Path
) -> tuple[list[tuple[int, Proc]], list[Proc], Balancer]:
    """Two API replicas, two workers, and HAProxy once it sees both replicas UP."""
    ports = [free_port(), free_port()]
    apis = [(port, await start_api(cluster, port)) for port in ports]
    workers = [await cluster.start_worker(), await cluster.start_worker()]
    lb = Balancer(ports, workdir)
    lb.start()
    await eventually(
        lambda: all(lb.status(f"api{i}") == "UP" for i in range(2)),
        within=30,
        retry_on=(OSError,),
        what="HAProxy seeing both replicas UP",
    )
    return apis, workers, lb


async def roll_under_load(
    args: argparse.Namespace, group: SentinelGroup, cluster: Cluster, workdir: Path, text: str
) -> tuple[Tally, list[Step], float]:
    """The tiers started, every client in its first turn, then the rollout (workers, API
    replicas, Redis) and the clients' last turns: what they saw, each step, the rollout's
    length."""
    lb: Balancer | None = None
    try:
        apis, workers, lb = await start_tiers(cluster, workdir)
        clients = Clients(lb.url, text, args.max_turns)
        tasks = [
            asyncio.create_task(clients.run(kind, i)) for kind in KINDS for i in range(args.clients)
        ]
        await eventually(lambda: len(clients.in_turn) == len(tasks), within=30)
        await asyncio.sleep(args.turn_seconds / 3)  # every turn well under way
        steps: list[Step] = []
        began = time.monotonic()
        async with asyncio.timeout(args.deadline):
            await roll_workers(cluster, workers, steps)
            await roll_apis(cluster, apis, lb, steps)
            await roll_redis(group, cluster.settings, steps)
            rolled = time.monotonic() - began
            clients.stop.set()
            await asyncio.gather(*tasks)
    finally:
        if lb is not None:
            lb.stop()
        cluster.stop_all()
    return clients.tally, steps, rolled


def outcome(
    args: argparse.Namespace, text: str, tally: Tally, steps: list[Step], rolled: float
) -> dict[str, Any]:
    median = statistics.median(tally.durations) if tally.durations else 0.0
    return {
        "turn_text": text,
        "clients_per_kind": args.clients,
        "completed": dict(tally.completed),
        "failed": dict(tally.failed),
        "cut": dict(tally.cut),
        "non_2xx": dict(tally.non_2xx),
        "turn_seconds_median": round(median, 1),
        "longest_added_delay_s": round(max(tally.durations, default=0.0) - median, 1),
        "rollout_seconds": round(rolled, 1),
        "steps": [(s.what, round(s.seconds, 2), s.note) for s in steps],
        "errors": tally.errors[:10],
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="hq-rollout-"))
    text = turn_text(args.turn_seconds)
    with SentinelGroup() as group:
        cluster = Cluster(rollout_settings(args, group, workdir), logdir=str(workdir))
        tally, steps, rolled = await roll_under_load(args, group, cluster, workdir, text)
    result = {**outcome(args, text, tally, steps, rolled), "logs": str(workdir)}
    rows = [[kind, tally.completed[kind], tally.failed[kind], tally.cut[kind]] for kind in KINDS]
    report.print_table("turns", ["client", "completed", "failed", "cut"], rows)
    report.print_table("steps", ["step", "seconds", "note"], result["steps"])
    print(json.dumps(result, indent=2))
    return result


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=2, help="clients of each kind")
    parser.add_argument("--turn-seconds", type=float, default=60.0)
    parser.add_argument("--max-turns", type=int, default=12, help="per client")
    parser.add_argument("--deadline", type=float, default=1800.0, help="seconds, whole rollout")
    return parser.parse_args()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(parse()))
