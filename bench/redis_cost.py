"""Redis commands per streamed token, split by who sends them.

Runs ``--runs`` echo runs (``--words`` input words, 20 by default → 21 tokens) at concurrency
``--concurrency`` through one API and one worker while a ``MONITOR`` connection records every
command Redis executes. Commands are attributed to the API process, the worker process, or
``lua`` (executed inside a script that a client sent as one EVALSHA). MONITOR slows Redis down,
so this measures counts, not speed; throughput.py reports the same total
(``total_commands_processed``) without it.

    python -m bench.redis_cost [--runs 100] [--concurrency 8] [--words 20] [--delay 0]
        [--coalesce-ms N]

A run's fixed cost (create, claim, finish, the SSE request's reads) is shared by its tokens,
so the figure per token falls with longer replies; ``--words 200`` is a typical chat reply.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
from collections import Counter
from typing import Any

import psutil
import redis

from bench.lib import closed_loop, deploy, report


def ports_of(pid: int, redis_port: int) -> set[int]:
    conns = psutil.Process(pid).net_connections(kind="tcp")
    return {c.laddr.port for c in conns if c.raddr and c.raddr.port == redis_port}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--words", type=int, default=closed_loop.INPUT_WORDS)
    parser.add_argument("--delay", type=float, default=0.0, help="echo seconds per token")
    parser.add_argument(
        "--coalesce-ms", type=float, default=None, help="stream_coalesce_ms (default: 80)"
    )
    return parser.parse_args()


Commands = Counter[tuple[str, str]]  # (client port or "lua", command) -> count


class Monitor:
    """``MONITOR`` on a thread of its own, counting commands by sender and name."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.by_source: Commands = Counter()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)

    def _watch(self) -> None:
        client = redis.Redis.from_url(self.url)
        with client.monitor() as m:  # type: ignore[no-untyped-call]  # redis-py: unannotated
            self._ready.set()
            while not self._stop.is_set():
                cmd: dict[str, Any] = m.next_command()
                name = cmd["command"].split(" ", 1)[0].strip('"').lower()
                source = "lua" if cmd.get("client_type") == "lua" else str(cmd["client_port"])
                self.by_source[(source, name)] += 1

    def stop(self, poke: redis.Redis) -> None:
        self._stop.set()
        poke.ping()  # one more command, so the monitor loop sees the stop flag
        self._thread.join(10)


async def count(args: argparse.Namespace) -> tuple[dict[str, Any], Commands, dict[str, set[int]]]:
    """The closed-loop runs under ``MONITOR``: their figures, the commands by sender, and the
    client ports of the API and the worker."""
    overrides: dict[str, Any] = {"echo_token_delay": args.delay}
    if args.coalesce_ms is not None:  # only when given: a pinned older commit lacks it
        overrides["stream_coalesce_ms"] = args.coalesce_ms
    with deploy.Deployment("redis-cost", overrides=overrides) as dep:
        base = await dep.start_api()
        [worker] = await dep.start_workers(1)
        await closed_loop.level(base, 4, 20, 60)  # warm-up: pools at their working size
        redis_port = int(dep.settings.redis.url.rsplit(":", 1)[1].split("/")[0])
        roles = {"api": dep.api_procs[0].pid, "worker": worker.pid}
        monitor = Monitor(dep.settings.redis.url)
        monitor.start()
        result = await closed_loop.level(base, args.concurrency, args.runs, 120, args.words)
        ports = {role: ports_of(pid, redis_port) for role, pid in roles.items()}
        monitor.stop(dep.redis)
    return result, monitor.by_source, ports


def by_role(
    by_source: Commands, ports: dict[str, set[int]]
) -> tuple[Counter[str], dict[str, Counter[str]]]:
    """Commands per role (api, worker, other, lua) and per role and command name."""
    per_role: Counter[str] = Counter()
    per_cmd: dict[str, Counter[str]] = {}
    for (source, name), n in by_source.items():
        if name in ("info", "monitor", "ping", "client"):
            if source != "lua" and not any(int(source) in p for p in ports.values()):
                continue  # our own probes
        role = (
            "lua"
            if source == "lua"
            else next(
                (r for r, p in ports.items() if source.isdigit() and int(source) in p), "other"
            )
        )
        per_role[role] += n
        per_cmd.setdefault(role, Counter())[name] += n
    return per_role, per_cmd


async def main() -> None:
    args = parse_args()
    result, by_source, ports = await count(args)
    per_role, per_cmd = by_role(by_source, ports)
    tokens = result["deltas"]
    sent = per_role["api"] + per_role["worker"] + per_role["other"]
    rows = [
        [role, n, round(n / tokens, 3), dict(per_cmd[role].most_common(6))]
        for role in ("api", "worker", "other", "lua")
        if (n := per_role[role])
    ]
    report.print_table(
        f"Redis commands for {result['ok']} runs, {tokens} streamed tokens "
        f"(concurrency {args.concurrency}, MONITOR attached)",
        ["source", "commands", "per token", "top commands"],
        rows,
    )
    print(
        f"\nsent by clients: {sent / tokens:.3f}/token; including commands inside scripts: "
        f"{(sent + per_role['lua']) / tokens:.3f}/token (target ≤ 1)"
    )
    report.emit_json(
        "redis_cost",
        {
            "runs": result["ok"],
            "failures": result["failures"],
            "tokens": tokens,
            "sent_per_token": round(sent / tokens, 3),
            "with_lua_per_token": round((sent + per_role["lua"]) / tokens, 3),
            "per_role": dict(per_role),
            "per_command": {k: dict(v) for k, v in per_cmd.items()},
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
