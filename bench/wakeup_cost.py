"""What one hand-off costs on this machine: the unit the stack's cost per token is made of.

At one client and spaced-out tokens, every token wakes something idle at each hand-off on its
way (the agent's thread → the worker's loop → Redis → the API's loop → the client), and a wake
costs CPU on both sides however little work it carries. This measures that unit, with nothing
of hermes-queue in it, so the floor's overhead figures can be read against it
(docs/performance.md, "The floor"):

- *loop iteration*: ``await asyncio.sleep(0)`` on a busy uvloop loop (no wake-up);
- *thread → loop*: a thread posts to an idle uvloop loop with ``call_soon_threadsafe``, one
  post per gap (as the agent's thread posts each token), CPU of both threads per post;
- *process ping*: two processes answer each other over a socket pair, one message per gap (as
  a worker and Redis, or Redis and the API), CPU of both per one-way message.

Each is measured at every gap of ``--gaps-ms``: how long the receiver sat idle before the
hand-off decides what waking it costs. On the 2-vCPU VMs measured here a wake after 10 ms of
idle (the fake LLM's token spacing) cost 3–5× one after 1 ms, so the unit to read a one-client
figure against is the one at that client's token spacing.

Bounded: ``--count`` hand-offs per gap, loopback and socket pairs only.

    python -m bench.wakeup_cost [--count 1000] [--gaps-ms 1,10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import threading
import time

import psutil
import uvloop

from bench.lib import report


async def loop_iteration(count: int) -> float:
    start = time.process_time()
    for _ in range(count):
        await asyncio.sleep(0)
    return (time.process_time() - start) / count


async def thread_to_loop(count: int, gap: float) -> float:
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[int] = asyncio.Queue()

    def post() -> None:
        for index in range(count):
            loop.call_soon_threadsafe(inbox.put_nowait, index)
            time.sleep(gap)

    me = psutil.Process()
    before = me.cpu_times()
    sender = threading.Thread(target=post)
    sender.start()
    for _ in range(count):
        await inbox.get()
    await asyncio.to_thread(sender.join)
    after = me.cpu_times()
    sleeping = count * _sleep_cost()  # the sender's own time.sleep calls, not a hand-off
    return float(after.user + after.system - before.user - before.system - sleeping) / count


def _sleep_cost() -> float:
    start = time.process_time()
    for _ in range(200):
        time.sleep(0)
    return (time.process_time() - start) / 200


def process_ping(count: int, gap: float) -> float:
    ours, theirs = socket.socketpair()
    child = os.fork()
    if child == 0:  # the echo side: answer every byte, then leave
        ours.close()
        for _ in range(count):
            theirs.sendall(theirs.recv(1))
        os._exit(0)
    theirs.close()
    me, peer = psutil.Process(), psutil.Process(child)
    before = me.cpu_times(), peer.cpu_times()
    for _ in range(count):
        ours.sendall(b"x")
        ours.recv(1)
        time.sleep(gap)
    after = me.cpu_times(), peer.cpu_times()
    os.waitpid(child, 0)
    used = sum(a.user + a.system - b.user - b.system for a, b in zip(after, before, strict=True))
    return float(used - count * _sleep_cost()) / (2 * count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="hand-offs per gap")
    parser.add_argument("--gaps-ms", default="1,10", help="idle time before each hand-off")
    args = parser.parse_args()
    gaps_ms = [float(gap) for gap in args.gaps_ms.split(",")]
    iteration = uvloop.run(loop_iteration(args.count * 10))
    rows = []
    for gap_ms in gaps_ms:
        hop = uvloop.run(thread_to_loop(args.count, gap_ms / 1000))
        ping = process_ping(args.count, gap_ms / 1000)
        rows.append([gap_ms, round(hop * 1e6, 1), round(ping * 1e6, 1)])
    report.print_table(
        f"CPU µs per hand-off, both sides ({args.count} per gap; a busy uvloop loop's "
        f"iteration: {iteration * 1e6:.2f} µs)",
        ["idle before (ms)", "thread → idle loop", "process → idle process (one way)"],
        rows,
    )
    report.emit_json(
        "wakeup_cost",
        {
            "count": args.count,
            "loop_iteration_us": round(iteration * 1e6, 2),
            "by_gap": [
                {"gap_ms": gap, "thread_to_loop_us": hop, "process_one_way_us": ping}
                for gap, hop, ping in rows
            ],
            "machine": report.machine_facts(),
        },
    )


if __name__ == "__main__":
    main()
