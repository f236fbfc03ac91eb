"""Chaos figures: faults under a steady load, on separate (simulated) hosts, through Sentinel.

Redis (a primary, a replica and three Sentinels), two API replicas and two workers each run in a
network namespace of their own (``tests/support/hosts.py``; needs root and iproute2), every process
configured with a ``redis+sentinel://`` URL. For each of ``--rounds`` rounds, each fault in turn
hits a deployment under load (``tests/support/load.py``: clients posting a run every
``--interval`` s, each read over SSE from either replica, half of the readers dropping and
resuming on the other with ``Last-Event-ID``):

* ``worker``: SIGKILL the worker running most runs (a new one starts on its host afterwards);
* ``api``: SIGKILL an API replica (its readers resume on the other; restarted afterwards);
* ``redis``: SIGKILL the Redis primary; Sentinel promotes the replica; the killed node comes
  back as a replica (as a supervisor would restart it). ``--down-after-ms`` above the lease
  makes the failover outlast it (Sentinel's default is 30 s against a 10 s lease);
* ``partition``: cut the host of the worker running most runs off the network for
  ``lease_seconds`` + 2 s, then reconnect it;
* ``drain``: SIGTERM the worker running most runs (a new one starts on its host afterwards);
  its turns are handed over at their next step boundary: the drain time is how long it took
  to exit.

Each run is a multi-step echo turn (three tool calls of 0.3 s, a reply of ~2.5 s of deltas), so
durable steps are exercised: the tool log the workers share (``echo_tool_log``) tells which tool
calls ran more than once and which model calls were made more than once.

Per fault it prints: runs accepted (2xx) during the window, terminal (the reader got a terminal
frame), lost (accepted, yet the record never became terminal), readers that saw an id twice,
readers with an unannounced loss (text not the output and no ``stream.gap``/``run.restarted``),
creations refused (by status), re-executed tool calls (a call that started twice: target 0)
and repeated model calls (one made twice), and the most steps repeated in any one run (durable
steps promise at most the one in flight),
the time from the fault to the terminal frame of the runs it caught in flight (p50/max) and the
recovery time: fault → the first event of a run created after
the fault (one that completed; p50/max over rounds). For ``redis`` it also notes when the replica
was promoted and when the killed node was back as a replica.

Every run carries a ``webhook``: a receiver on the client host (``tests/support/
webhook_receiver.py``, answering after 0.3 s, so deliveries are in flight when a fault hits)
verifies each delivery with ``standardwebhooks``. The webhook column: deliveries expected (the
accepted runs whose record ended), received (distinct verified ``webhook-id``s of those runs,
waited for until the outbox drains), missing (expected, never received: target 0) and
duplicates (a ``webhook-id`` received more than once: at least once allows it).

    sudo python -m bench.chaos [--rounds 2] [--min-replicas 1] [--faults worker,api,partition,drain]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from bench.lib import deploy, report
from bench.lib.chaos_figures import HEADER, repeated, summarise, table, webhooks
from hermes_queue.config import Settings
from tests.support.hosts import Spread, spread
from tests.support.load import Load
from tests.support.netns import Host
from tests.support.webhook_receiver import Receiver, new_secret, receiving

FAULTS = ("worker", "api", "redis", "partition", "drain")
# A multi-step echo turn: ~2.5 s of deltas around three tool calls of 0.3 s each.
TURN = (
    "chaos " + " ".join(f"w{i}" for i in range(16)) + " [tool:alpha] [tool:beta] [tool:gamma]"
    " [slowtool:0.3] [slow:0.05]"
)
NETWORK = "10.231.0.0/24"  # tests/support/netns.py Network's subnet: the bench's hosts
SETTLE_S = 4.0  # load keeps running this long after a fault has been repaired
RECEIVER_DELAY_S = 0.3  # the receiver answers after this long: deliveries are in flight
WEBHOOK_WAIT_S = 90.0  # how long missing deliveries are waited for, after the records ended


async def busiest_worker(d: Spread, load: Load) -> Host:
    """The worker host running most of the runs in flight."""
    counts: Counter[Host] = Counter()
    for trace in load.accepted:
        if trace.end:
            continue
        host = await d.holder(trace.run_id)
        if host is not None:
            counts[host] += 1
    return counts.most_common(1)[0][0] if counts else next(iter(d.workers))


Notes = dict[str, float]  # milestones of a fault: seconds after it


async def kill_worker(d: Spread, load: Load, notes: Notes) -> Callable[[], Awaitable[None]]:
    host = await busiest_worker(d, load)
    d.workers[host].kill()

    async def repair() -> None:
        await d.start_worker(host)

    return repair


async def kill_api(d: Spread, load: Load, notes: Notes) -> Callable[[], Awaitable[None]]:
    host = next(iter(d.apis))
    d.apis[host][1].kill()

    async def repair() -> None:
        await d.start_api(host)

    return repair


async def kill_primary(d: Spread, load: Load, notes: Notes) -> Callable[[], Awaitable[None]]:
    assert d.group is not None
    old = d.group.kill_primary()
    killed = time.monotonic()

    async def repair() -> None:
        assert d.group is not None
        await d.group.wait_for_new_primary(old)
        notes["promoted_s"] = round(time.monotonic() - killed, 2)
        await d.group.restart(old)
        notes["replica_back_s"] = round(time.monotonic() - killed, 2)

    return repair


async def partition(d: Spread, load: Load, notes: Notes) -> Callable[[], Awaitable[None]]:
    host = await busiest_worker(d, load)
    host.cut()

    async def repair() -> None:
        await asyncio.sleep(d.cluster.settings.runs.lease_seconds + 2)
        host.reconnect()

    return repair


async def drain_worker(d: Spread, load: Load, notes: Notes) -> Callable[[], Awaitable[None]]:
    host = await busiest_worker(d, load)
    proc = d.workers[host]
    asked = time.monotonic()
    proc.process.send_signal(signal.SIGTERM)
    await asyncio.to_thread(proc.process.wait, 60)
    notes["drain_s"] = round(time.monotonic() - asked, 2)

    async def repair() -> None:
        await d.start_worker(host)

    return repair


INJECT = {
    "worker": kill_worker,
    "api": kill_api,
    "redis": kill_primary,
    "partition": partition,
    "drain": drain_worker,
}


async def one_fault(
    d: Spread, fault: str, clients: int, interval: float, receiver: Receiver
) -> dict[str, Any]:
    load = Load(
        d.http,
        d.urls,
        text=TURN,
        clients=clients,
        interval=interval,
        max_runs=400,
        fields={"webhook": receiver.url},
    )
    load.start()
    try:
        await load.wait_for_completed(2 * clients, within=60)
        notes: Notes = {}
        fault_at = time.monotonic()
        repair = await INJECT[fault](d, load, notes)
        await repair()
        repaired_at = time.monotonic()
        await load.wait_for_completed(clients, since=repaired_at, within=60)
        await asyncio.sleep(SETTLE_S)
        await load.finish(within=180)
    finally:
        await load.cancel()
    await load.settle_records(within=d.cluster.settings.runs.lease_seconds * 4 + 20)
    repeats = repeated(d.cluster.settings.agents.echo_tool_log, {t.run_id for t in load.accepted})
    hooks = await webhooks(load, receiver, WEBHOOK_WAIT_S)
    return {**summarise(load, fault_at, repaired_at), **repeats, **hooks, **notes}


def chaos_settings(args: argparse.Namespace, secret: str) -> Settings:
    """Every process's settings: short leases, Sentinel's replicas acknowledging, the workers'
    shared tool log, every run's webhook to the receiver on the client host."""
    return Settings.of(
        namespace=f"chaos-{uuid.uuid4().hex[:8]}",
        api_key=deploy.API_KEY,
        lease_seconds=args.lease,
        heartbeat_seconds=args.lease / 6,
        reaper_interval_seconds=0.25,
        keepalive_seconds=1.0,
        max_attempts=3,
        metrics_port=0,
        redis_min_replicas=args.min_replicas,
        store_url="sqlite:///:memory:",  # runs only; no session store traffic
        # The workers' shared tool log (the hosts share the filesystem, not the network).
        echo_tool_log=tempfile.mkstemp(prefix="chaos-tools-", suffix=".jsonl")[1],
        # Every run's webhook goes to the receiver on the client host, on the bench's own
        # network (tests/support/netns.py: 10.231.0.0/24), allow-listed as a private network.
        webhook_secret=(secret,),
        webhook_allowed_hosts=(NETWORK,),
        webhook_timeout_seconds=5.0,
        webhook_retry_schedule=("1s", "2s", "5s", "10s", "20s"),
        webhook_poll_seconds=0.25,
    ).validate()


async def run_faults(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Every round, every fault in turn on one spread deployment: each one's figures."""
    secret = new_secret()
    settings = chaos_settings(args, secret)
    faults = [f for f in args.faults.split(",") if f]
    results: dict[str, list[dict[str, Any]]] = {fault: [] for fault in faults}
    async with spread(
        settings, sentinel=True, replicas=args.replicas, down_after_ms=args.down_after_ms
    ) as d:
        async with receiving([secret], host=d.client.address) as receiver:
            receiver.delay = RECEIVER_DELAY_S
            for round_no in range(args.rounds):
                for fault in faults:
                    outcome = await one_fault(d, fault, args.clients, args.interval, receiver)
                    results[fault].append(outcome)
                    print(f"round {round_no + 1} {fault}: {outcome}", flush=True)
    return results


async def main(args: argparse.Namespace) -> None:
    results = await run_faults(args)
    report.print_table(
        f"chaos: lease {args.lease} s, Sentinel down-after {args.down_after_ms} ms, "
        f"{args.replicas} replica(s), "
        f"redis_min_replicas {args.min_replicas}, "
        f"{args.clients} clients x 1 run / {args.interval} s",
        HEADER,
        table(results),
    )
    report.emit_json(
        "chaos",
        {
            "lease_seconds": args.lease,
            "down_after_ms": args.down_after_ms,
            "redis_min_replicas": args.min_replicas,
            "replicas": args.replicas,
            "results": results,
            "machine": report.machine_facts(),
        },
    )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--min-replicas", type=int, default=1)
    parser.add_argument("--replicas", type=int, default=1, help="Redis replicas")
    parser.add_argument("--lease", type=float, default=3.0)
    parser.add_argument(
        "--down-after-ms",
        type=int,
        default=1_000,
        help="Sentinel's down-after-milliseconds: above the lease, a failover outlasts it",
    )
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--interval", type=float, default=0.5)
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
