"""One Redis primary's ceiling for hermes-queue's real commands, and how it grows with primaries.

Load processes (``--procs``, multiprocessing; ``lib/capacity_load.py``) pipeline the project's
own Lua scripts to the primaries until Redis' core is full, and the rates are read over a window
in which Redis' CPU (``INFO cpu`` used_cpu_user + used_cpu_sys deltas) is measured too, so each
figure comes with the share of a core it took (≈ 100 % means Redis was the bottleneck) and the
Redis CPU per operation (the figure that does not depend on who else used the machine):

- **appends**: ``append.lua`` with one ``message.delta`` (one token; and ``--window-tokens``
  tokens, what a delta window merges into one append), each publishing to the run's channel,
  which one stream hub per API replica reads (``--readers``: hubs subscribed per stream; 1 is
  one API replica);
- **runs**: a run's fixed work (create, the worker's look at the queue and claim, first append,
  finish with the reply, the SSE request's opening reads and reader presence;
  ``capacity_load.run_commands``), on fresh runs;
- **streams** at 20/50/100 tokens/s: derived from the two above for ``--tokens-per-run``-token
  replies, with one append per token (no window) and with the default delta window.

``--primaries 3`` starts a loopback Redis Cluster of three primaries (``redis-cli --cluster
create``) and spreads the load: each load process drives runs whose keys hash to the slots of
one primary (the run keys' ``{run_id}`` tag; the runs workload gives each process a namespace
with a hash tag on its primary, so the queue and lease keys its create/claim/finish touch are
in the same slot). ``--nodes host:port,…`` uses primaries already running instead (a cluster's
are read from ``CLUSTER SLOTS``). Everything is bounded: ``--seconds`` per scenario.

    python -m bench.capacity [--primaries 1|3] [--procs 3] [--seconds 4] [--readers 0,1,2,4,8]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
import uuid
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import psutil
from redis.crc import key_slot

from bench.lib import capacity_load as load
from bench.lib import redis_nodes, report, script_calls
from bench.lib.redis_nodes import Node
from hermes_queue.config.groups import RunSettings
from hermes_queue.keys import Keys

WARMUP_S = 1.0
WINDOW_MS = RunSettings().stream_coalesce_ms  # the workers' default delta window


def runs_on(node: Node, keys: Keys, count: int, prefix: str) -> list[str]:
    """``count`` run ids whose keys hash to a slot ``node`` owns."""
    found: list[str] = []
    serial = 0
    while len(found) < count:
        serial += 1
        run_id = f"{prefix}_{serial}"
        if node.owns(key_slot(keys.run(run_id).encode())):
            found.append(run_id)
    return found


def tagged_namespace(node: Node, base: str) -> str:
    """A namespace whose every key hashes to one slot of ``node`` (a hash tag in it)."""
    serial = 0
    while True:
        serial += 1
        namespace = f"{base}{{t{serial}}}"
        if node.owns(key_slot(Keys(namespace).queue.encode())):
            return namespace


def prepare(nodes: list[Node]) -> str:
    """Load the reader-presence script on every primary; its SHA. (The run scripts are loaded
    with the calls that use them: ``load.load_calls``.)"""
    [sha] = {load.vouch_sha(node.client()) for node in nodes}  # one text, one SHA
    return sha


def append_specs(
    nodes: list[Node], procs: int, streams: int, tokens: int, secs: float
) -> list[load.Spec]:
    """Load specs for appends of ``tokens`` tokens' text, ``streams`` running runs per process
    (records as claim.lua leaves them: attempt 1, running), processes spread round robin over
    the primaries."""
    namespace = f"cap-{uuid.uuid4().hex[:8]}"
    keys = Keys(namespace)
    delta = [("message.delta", {"delta": "token " * tokens})]
    calls = {"append": script_calls.append_call(keys, delta)}
    specs = []
    for index in range(procs):
        node = nodes[index % len(nodes)]
        run_ids = runs_on(node, keys, streams, f"p{index}")
        pipe = node.client().pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hset(
                keys.run(run_id),
                mapping={
                    "run_id": run_id,
                    "session_id": "",
                    "status": "running",
                    "attempt": "1",
                    "seq": "0",
                },
            )
        pipe.execute()
        node_calls = load.load_calls(node.client(), calls)
        spec = load.Spec(node.host, node.port, "append", node_calls, namespace, run_ids, secs)
        specs.append(spec)
    return specs


def run_specs(nodes: list[Node], procs: int, vouch: str, secs: float) -> list[load.Spec]:
    """Load specs for a run's fixed work, each process in a namespace of its own (on a cluster,
    one with a hash tag on its primary), with the calls the project makes there."""
    base = f"cap-{uuid.uuid4().hex[:8]}"
    specs = []
    for i in range(procs):
        node = nodes[i % len(nodes)]
        namespace = tagged_namespace(node, f"{base}-{i}") if node.cluster else f"{base}-{i}"
        calls = load.load_calls(node.client(), script_calls.run_calls(Keys(namespace)))
        specs.append(
            load.Spec(node.host, node.port, "run", calls, namespace, seconds=secs, vouch=vouch)
        )
    return specs


def start_readers(
    ctx: Any, nodes: list[Node], specs: list[load.Spec], readers: int
) -> mp.process.BaseProcess | None:
    """``readers`` hubs per stream of ``specs``, subscribed on every primary (none for 0),
    in a process of their own, once they are subscribed."""
    if not readers:
        return None
    keys = Keys(specs[0].namespace)
    channels = [
        (n.host, n.port, [keys.events(r) for s in specs if s.port == n.port for r in s.run_ids])
        for n in nodes
    ]
    ready = ctx.Event()
    reader_proc: mp.process.BaseProcess = ctx.Process(
        target=load.readers_process, args=(channels, readers, specs[0].seconds + 5, ready)
    )
    reader_proc.start()
    ready.wait(30)
    return reader_proc


def measure(
    nodes: list[Node], specs: list[load.Spec], readers: int, window_s: float
) -> list[dict[str, Any]]:
    """Run ``specs`` (and ``readers`` hubs per primary); per primary: operations/s, Redis CPU
    share and µs per operation over the window after the warm-up."""
    ctx = mp.get_context("spawn")
    results: Any = ctx.Queue()
    counters = [ctx.Value("q", 0) for _ in specs]
    reader_proc = start_readers(ctx, nodes, specs, readers)
    procs = [
        ctx.Process(target=load.load_process, args=(s, c, results))
        for s, c in zip(specs, counters, strict=True)
    ]
    for proc in procs:
        proc.start()
    time.sleep(WARMUP_S + 1.0)  # spawn, imports, connections
    clients = [psutil.Process(p.pid) for p in [*procs, reader_proc] if p is not None]
    start, cpu0 = time.monotonic(), [redis_nodes.cpu_s(n) for n in nodes]
    done0, client0 = [c.value for c in counters], sum(report.cpu_s(c) for c in clients)
    time.sleep(window_s)
    elapsed = time.monotonic() - start
    cpu1 = [redis_nodes.cpu_s(n) for n in nodes]
    done1, client1 = [c.value for c in counters], sum(report.cpu_s(c) for c in clients)
    outcomes = [results.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(30)
    if reader_proc is not None:
        reader_proc.terminate()
        reader_proc.join(10)
    errors = [e for o in outcomes for e in o["errors"]]
    refused = sum(o["refused"] for o in outcomes)
    if errors or refused:
        raise RuntimeError(f"load failed: {refused} refused, errors {errors[:3]}")
    client_pct = round((client1 - client0) / elapsed * 100, 1)
    return [
        node_row(node, specs, (done0, done1), cpu1[i] - cpu0[i], elapsed, client_pct)
        for i, node in enumerate(nodes)
    ]


def node_row(
    node: Node,
    specs: list[load.Spec],
    done: tuple[list[int], list[int]],
    cpu: float,
    elapsed: float,
    client_cpu_pct: float,
) -> dict[str, Any]:
    """One primary's figures over the window: its operations (``done``: each load process's
    count at the window's start and end) and its Redis CPU seconds."""
    ops = sum(
        d1 - d0 for s, d0, d1 in zip(specs, done[0], done[1], strict=True) if s.port == node.port
    )
    return {
        "node": node.address,
        "ops_per_s": round(ops / elapsed),
        "redis_cpu_pct": round(cpu / elapsed * 100, 1),
        "redis_us_per_op": round(cpu / ops * 1e6, 2) if ops else None,
        "ops_per_core_s": round(ops / cpu) if cpu else None,
        "client_cpu_pct": client_cpu_pct,
    }


def total(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ops = sum(r["ops_per_s"] for r in rows)
    cpu = sum(r["redis_cpu_pct"] for r in rows)
    return {
        "ops_per_s": ops,
        "redis_cpu_pct": round(cpu, 1),
        "redis_us_per_op": round(cpu / 100 / ops * 1e6, 2) if ops else None,
    }


def streams_at(
    rate: float, per_append_s: float, per_run_s: float, tokens: int, per_token_append: float
) -> int:
    """Concurrent streams at ``rate`` tokens/s one Redis core carries: each costs
    ``rate × per_token_append`` appends/s and ``rate / tokens`` runs/s of fixed work."""
    cost = rate * per_token_append * per_append_s + rate / tokens * per_run_s
    return int(1 / cost)


def nodes_of(args: argparse.Namespace) -> AbstractContextManager[list[Node]]:
    if args.nodes:
        return nullcontext(redis_nodes.given(args.nodes))
    return redis_nodes.started(args.primaries)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--primaries", type=int, default=1, help="start 1 server or a cluster")
    parser.add_argument("--nodes", default="", help="host:port,… of primaries already running")
    parser.add_argument("--procs", type=int, default=3, help="load processes in all")
    parser.add_argument("--streams", type=int, default=200, help="runs per load process")
    parser.add_argument("--seconds", type=float, default=4.0, help="measured window")
    parser.add_argument(
        "--readers", default="0,1,2,4,8", help="hubs per stream to try (1 is always measured)"
    )
    parser.add_argument(
        "--window-tokens",
        type=int,
        default=4,
        help="tokens per append under the window (80 ms at 50 tokens/s)",
    )
    parser.add_argument("--tokens-per-run", type=int, default=201)
    return parser.parse_args()


Scenario = tuple[str, list[load.Spec], int]  # its name, its load processes, hubs per stream


def scenarios(nodes: list[Node], args: argparse.Namespace) -> list[Scenario]:
    """Appends of 1 token with each count of readers, of the window's tokens, a run's fixed
    work: each with its load processes' specs."""
    secs = WARMUP_S + 1.0 + args.seconds + 0.5
    vouch = prepare(nodes)
    out: list[Scenario] = []
    # One hub per stream (one API replica) is what the per-core summary below uses.
    for readers in sorted({1, *(int(r) for r in args.readers.split(","))}):
        specs = append_specs(nodes, args.procs, args.streams, 1, secs)
        out.append((f"append 1 token, {readers} reader(s)", specs, readers))
    specs = append_specs(nodes, args.procs, args.streams, args.window_tokens, secs)
    out.append((f"append {args.window_tokens} tokens, 1 reader(s)", specs, 1))
    out.append(("run fixed work", run_specs(nodes, args.procs, vouch, secs), 0))
    return out


def run_scenarios(args: argparse.Namespace, out: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Every scenario on the primaries, in turn: per scenario, its rows per primary. Notes the
    primaries and Redis's version in ``out``."""
    with nodes_of(args) as nodes:
        out["redis_version"] = nodes[0].info("server")["redis_version"]
        out["primaries"] = [n.address for n in nodes]
        measured: dict[str, list[dict[str, Any]]] = {}
        for name, specs, readers in scenarios(nodes, args):
            measured[name] = measure(nodes, specs, readers, args.seconds)
            print(name, measured[name], flush=True)
    return measured


def print_scenarios(
    measured: dict[str, list[dict[str, Any]]], out: dict[str, Any], args: argparse.Namespace
) -> None:
    table = []
    for name, rows in measured.items():
        for row in rows + ([{"node": "total", **total(rows)}] if len(rows) > 1 else []):
            table.append(
                [
                    name,
                    row["node"],
                    row["ops_per_s"],
                    row["redis_cpu_pct"],
                    row["redis_us_per_op"],
                    row.get("client_cpu_pct", ""),
                ]
            )
    primaries = len(out["primaries"])
    report.print_table(
        f"Redis {out['redis_version']}, {primaries} primar{'y' if primaries == 1 else 'ies'},"
        f" {args.procs} load processes",
        ["scenario", "primary", "ops/s", "Redis CPU %", "Redis µs/op", "load CPU %"],
        table,
    )


def per_core(measured: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    """Per primary core (µs per op at the measured share of a core): the plannable figures,
    printed and returned."""

    def seconds_per_op(name: str) -> float:
        return report.median([r["redis_us_per_op"] for r in measured[name]]) / 1e6

    per_append = seconds_per_op("append 1 token, 1 reader(s)")
    per_window_append = seconds_per_op(f"append {args.window_tokens} tokens, 1 reader(s)")
    per_run = seconds_per_op("run fixed work")
    rows = []
    for rate in (20, 50, 100):
        window_appends = min(1.0, 1000 / WINDOW_MS / rate)  # appends per token with a window
        rows.append(
            [
                rate,
                streams_at(rate, per_append, per_run, args.tokens_per_run, 1.0),
                streams_at(rate, per_window_append, per_run, args.tokens_per_run, window_appends),
            ]
        )
    report.print_table(
        f"One primary core: {1 / per_append:,.0f} appends/s (1 token, 1 reader), "
        f"{1 / per_run:,.0f} runs/s of fixed work; concurrent streams of "
        f"{args.tokens_per_run}-token replies",
        ["tokens/s", "no window", f"{WINDOW_MS:g} ms window"],
        rows,
    )
    return {
        "appends_per_s": round(1 / per_append),
        "window_appends_per_s": round(1 / per_window_append),
        "runs_per_s": round(1 / per_run),
        "streams": {str(r[0]): {"no_window": r[1], "window": r[2]} for r in rows},
    }


def main() -> None:
    args = parse_args()
    out: dict[str, Any] = {"machine": report.machine_facts()}
    measured = run_scenarios(args, out)
    print_scenarios(measured, out, args)
    out["scenarios"] = measured
    out["per_core"] = per_core(measured, args)
    report.emit_json("capacity", out)


if __name__ == "__main__":
    main()
