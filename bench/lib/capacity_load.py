"""The load processes of ``bench/capacity.py``: each pipelines the project's real Lua scripts
(``runs/lua``, loaded by ``runs/scripts.load_script`` as the workers load them, called by
``EVALSHA`` with the keys and arguments ``runs/attempt.py`` and ``runs/repository.py`` pass)
to one Redis primary, so that what saturates is Redis, not this project's Python.

Commands are packed by hand into RESP and replies parsed by hiredis (C), several batches in
flight per connection: a load process spends a few µs per command, so two or three of them
keep a Redis core busy on one spare core. Pub/sub readers (an API replica's stream hub each)
are sockets subscribed to every run's channel, drained without parsing.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import hiredis

from hermes_queue.keys import Keys
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.scripts import load_script
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.streams import presence
from hermes_queue.streams.codec import encode_data

BATCH = 128  # appends per send (a run workload sends BATCH // 8 runs)
IN_FLIGHT = 3  # batches sent before the first reply is read
BLOCKS = 16  # distinct append batches a process cycles through
MAXLEN = 10_000  # stream_maxlen's default
RETENTION = 86_400
RECORD_TTL = RETENTION + 3_600
LEASE_MS = 10_000


def bulks(*args: Any) -> bytes:
    """Arguments as RESP bulk strings (a command's body, without its array header)."""
    out = []
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def resp(*args: Any) -> bytes:
    """One command in RESP."""
    return b"*%d\r\n" % len(args) + bulks(*args)


# The further preludes a script is loaded with, as its owner loads it (``runs/attempt.py``).
_PRELUDES = {"finish": ("steer_prelude",)}


def script_sha(client: Any, name: str) -> str:
    """Load a run script (with its preludes, as the workers do) on a node; its SHA. ``vouch``:
    the API's reader-presence script (``streams/presence.py``)."""
    if name == "vouch":
        return str(client.script_load(presence._VOUCH))
    return str(client.script_load(load_script(name, *_PRELUDES.get(name, ()))))


@dataclass
class Spec:
    """What one load process does: the node, the runs it drives, how hard."""

    host: str
    port: int
    kind: str  # "append" or "run"
    shas: dict[str, str]
    namespace: str
    run_ids: list[str] = field(default_factory=list)
    tokens_per_append: int = 1
    seconds: float = 6.0


class Pipe:
    """A connection that sends batches and counts replies, ``IN_FLIGHT`` batches ahead."""

    def __init__(self, host: str, port: int, nil_refuses: bool) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()
        self.errors: list[str] = []
        self.refused = 0
        # A nil reply is a fenced-off append (append.lua); other scripts may answer nil.
        self.nil_refuses = nil_refuses

    def read(self, count: int) -> None:
        while count:
            reply = self.reader.gets()
            if reply is False:
                self.reader.feed(self.sock.recv(1 << 20))
                continue
            count -= 1
            if isinstance(reply, hiredis.ReplyError):
                if len(self.errors) < 5:
                    self.errors.append(str(reply))
            elif reply is None and self.nil_refuses:
                self.refused += 1


Batches = Iterator[tuple[bytes, int, int]]  # (payload, commands, units: appends or runs)


def drive(spec: Spec, batches: Batches, done: Any) -> dict[str, Any]:
    """Send ``batches`` until ``spec.seconds`` pass; ``done`` (a shared counter) counts the
    units whose replies came back, so the parent reads a rate over a window of its own."""
    pipe = Pipe(spec.host, spec.port, nil_refuses=spec.kind == "append")
    pending: list[tuple[int, int]] = []
    deadline = time.monotonic() + spec.seconds
    while time.monotonic() < deadline:
        payload, commands, units = next(batches)
        pipe.sock.sendall(payload)
        pending.append((commands, units))
        if len(pending) > IN_FLIGHT:
            commands, units = pending.pop(0)
            pipe.read(commands)
            with done.get_lock():
                done.value += units
    for commands, _ in pending:
        pipe.read(commands)
    return {"errors": pipe.errors, "refused": pipe.refused, "pid": os.getpid()}


def append_batches(spec: Spec) -> Batches:
    """``BATCH`` fenced appends of one ``message.delta`` each (``tokens_per_append`` tokens of
    text: what a delta window merges), round robin over the process's runs."""
    keys = Keys(spec.namespace)
    sha = spec.shas["append"]
    data = encode_data({"delta": "token " * spec.tokens_per_append})
    # EVALSHA sha 2 record events attempt maxlen ttl | ts token | type data: 12 arguments.
    heads = [
        bulks("EVALSHA", sha, 2, keys.run(r), keys.events(r), 1, MAXLEN, RETENTION)
        for r in spec.run_ids
    ]
    tail = bulks("message.delta", data)
    # Built once and sent in turn: each run's consecutive appends still carry different batch
    # tokens (a repeat of the run's last one would be answered as a retry, not appended).
    blocks = []
    serial = 0
    for _ in range(BLOCKS):
        parts = []
        ts = repr(time.time())
        for _ in range(BATCH):
            serial += 1
            head = heads[serial % len(heads)]
            parts.append(b"*12\r\n" + head + bulks(ts, f"{os.getpid()}.{serial}") + tail)
        blocks.append(b"".join(parts))
    while True:
        for block in blocks:
            yield block, BATCH, BATCH


def run_commands(spec: Spec, keys: Keys, run_id: str, fields: dict[str, str]) -> list[bytes]:
    """A run's fixed Redis work, as the stack does it (``bench/redis_cost.py --words 1`` lists
    it): the API's create, the worker's look at the queue (``jobqueue/worker.py``) and claim,
    its first append (``message.started``), the terminal transition with the reply
    (``assistant.completed``, ``run.completed``), the SSE request's opening reads (record and
    first page, one pipeline in ``api/feed.py``) and its reader presence (vouched, then removed:
    ``streams/presence.py``). Not here: the hub's ``SUBSCRIBE`` of the run's channel (a
    subscribed connection takes no other commands) and lease renewals (per second, not per
    run)."""
    shas = spec.shas
    now = repr(time.time())
    stats = keys.stats(int(time.time() // 60))
    flat = [item for pair in fields.items() for item in pair]
    reply = "Echo: " + "word " * 20
    return [
        resp(
            "EVALSHA",
            shas["create"],
            2,
            keys.run(run_id),
            keys.queue,
            run_id,
            RECORD_TTL,
            keys.wake_channel,
            *flat,
        ),
        resp("ZRANGE", keys.queue, 0, 15),
        resp(
            "EVALSHA",
            shas["claim"],
            4,
            keys.run(run_id),
            keys.leases,
            keys.queue,
            stats,
            run_id,
            "bench-worker",
            LEASE_MS,
            now,
            RECORD_TTL,
        ),
        resp(
            "EVALSHA",
            shas["append"],
            2,
            keys.run(run_id),
            keys.events(run_id),
            1,
            MAXLEN,
            RETENTION,
            now,
            f"{run_id}.0",
            "message.started",
            encode_data({"message_id": f"msg_{run_id}"}),
        ),
        resp(
            "EVALSHA",
            shas["finish"],
            4,
            keys.run(run_id),
            keys.events(run_id),
            keys.leases,
            stats,
            run_id,
            1,
            "completed",
            "run.completed",
            now,
            encode_data({"output": reply, "usage": {"input_tokens": 20}}),
            RETENTION,
            MAXLEN,
            1,
            "assistant.completed",
            encode_data({"content": reply}),
            "output",
            reply,
            "usage",
            json.dumps({"input_tokens": 20}),
        ),
        resp("EVALSHA", shas["vouch"], 1, keys.readers(run_id), "bench-reader", 6000),
        resp("HGETALL", keys.run(run_id)),
        resp("XRANGE", keys.events(run_id), "(0-0", "+", "COUNT", 100),
        resp("ZREM", keys.readers(run_id), "bench-reader"),
    ]


def run_batches(spec: Spec) -> Batches:
    """Whole runs' fixed work, ``BATCH // 8`` runs per send, each on a fresh run id."""
    keys = Keys(spec.namespace)
    fields = NewRun("RUN", "bench", TurnRequest(message="word " * 20)).fields()
    serial = 0
    per_send = max(1, BATCH // 8)
    while True:
        parts: list[bytes] = []
        for _ in range(per_send):
            serial += 1
            run_id = f"run_{os.getpid()}_{serial}"
            parts += run_commands(spec, keys, run_id, {**fields, "run_id": run_id})
        yield b"".join(parts), len(parts), per_send


LOADS: dict[str, Callable[[Spec], Batches]] = {
    "append": append_batches,
    "run": run_batches,
}


def load_process(spec: Spec, done: Any, results: Any) -> None:
    """A load process's body (multiprocessing target)."""
    results.put(drive(spec, LOADS[spec.kind](spec), done))


def readers_process(
    nodes: list[tuple[str, int, list[str]]], readers: int, seconds: float, ready: Any
) -> None:
    """``readers`` subscriber connections per node (one API replica's hub each), each
    subscribed to that node's run channels, drained until ``seconds`` pass."""
    selector = selectors.DefaultSelector()
    for host, port, channels in nodes:
        for _ in range(readers):
            sock = socket.create_connection((host, port))
            for start in range(0, len(channels), 500):
                sock.sendall(resp("SUBSCRIBE", *channels[start : start + 500]))
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
    ready.set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for key, _ in selector.select(0.2):
            try:
                key.fileobj.recv(1 << 20)  # type: ignore[union-attr]
            except BlockingIOError:
                pass
