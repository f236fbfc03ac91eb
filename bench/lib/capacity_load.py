"""The load processes of ``bench/capacity.py``: each pipelines the project's real Lua scripts
(``runs/lua``) to one Redis primary, so that what saturates is Redis, not this project's Python.
Each script call is the project's own: recorded once per call shape from ``RunRepository`` and
``Attempt`` (``script_calls``: the scripts' text as registered, their keys and arguments as
passed), then sent for each run with its id in place, never a list of arguments kept here.

Commands are packed into RESP ahead and replies parsed by hiredis (C), several batches in
flight per connection: a load process spends a few µs per command, so two or three of them
keep a Redis core busy on one spare core. Pub/sub readers (an API replica's stream hub each)
are sockets subscribed to every run's channel, drained without parsing.
"""

from __future__ import annotations

import os
import selectors
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import hiredis

from bench.lib.script_calls import Call
from hermes_queue.keys import Keys
from hermes_queue.streams import presence

BATCH = 128  # appends per send (a run workload sends BATCH // 8 runs)
IN_FLIGHT = 3  # batches sent before the first reply is read
BLOCKS = 16  # distinct append batches a process cycles through
READER = "bench-reader"  # the API process whose reader presence a run's SSE request writes


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


def vouch_sha(client: Any) -> str:
    """Load the API's reader-presence script (``streams/presence.py``) on a node; its SHA."""
    return str(client.script_load(presence._VOUCH))


def load_calls(client: Any, calls: dict[str, Call]) -> dict[str, Call]:
    """Load the scripts of ``calls`` on a node (as registered: with their preludes); the calls."""
    for call in calls.values():
        client.script_load(call.script)
    return calls


@dataclass
class Spec:
    """What one load process does: the node, the runs it drives, how hard."""

    host: str
    port: int
    kind: str  # "append" or "run"
    # The project's script calls (script_calls), loaded on the node: "append" for an append
    # workload, "create", "claim", "first_append" and "finish" for a run workload.
    calls: dict[str, Call]
    namespace: str
    run_ids: list[str] = field(default_factory=list)
    seconds: float = 6.0
    vouch: str = ""  # the reader-presence script's SHA (a run workload)


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
    """``BATCH`` fenced appends (``spec.calls["append"]``: one ``message.delta`` of the tokens
    it was recorded with), round robin over the process's runs."""
    append = spec.calls["append"]
    # Built once and sent in turn: each run's consecutive appends still carry different batch
    # tokens (a repeat of the run's last one would be answered as a retry, not appended).
    blocks = []
    serial = 0
    for _ in range(BLOCKS):
        parts = []
        for _ in range(BATCH):
            serial += 1
            run_id = spec.run_ids[serial % len(spec.run_ids)]
            parts.append(append.packed(run_id, f"{os.getpid()}.{serial}"))
        blocks.append(b"".join(parts))
    while True:
        for block in blocks:
            yield block, BATCH, BATCH


def run_commands(spec: Spec, keys: Keys, run_id: str) -> list[bytes]:
    """A run's fixed Redis work, as the stack does it (``bench/redis_cost.py --words 1`` lists
    it): the API's create, the worker's look at the queue (its turn order's head:
    ``jobqueue/worker.py``) and claim, its first append (``message.started``), the terminal
    transition with the reply (``assistant.completed``, ``run.completed``), the SSE request's
    opening reads (record and first page, one pipeline in ``api/feed.py``) and its reader
    presence (vouched, then removed: ``streams/presence.py``). Not here: the hub's
    ``SUBSCRIBE`` of the run's channel (a subscribed connection takes no other commands) and
    lease renewals (per second, not per run)."""
    calls = spec.calls
    readers = keys.readers(run_id)
    return [
        calls["create"].packed(run_id),
        resp("ZRANGE", keys.turn_order_at(0), 0, 15),
        calls["claim"].packed(run_id),
        calls["first_append"].packed(run_id, f"{run_id}.0"),
        calls["finish"].packed(run_id),
        resp("EVALSHA", spec.vouch, 1, readers, READER, presence.TTL_MS),
        resp("HGETALL", keys.run(run_id)),
        resp("XRANGE", keys.events(run_id), "(0-0", "+", "COUNT", 100),
        resp("ZREM", readers, READER),
    ]


def run_batches(spec: Spec) -> Batches:
    """Whole runs' fixed work, ``BATCH // 8`` runs per send, each on a fresh run id."""
    keys = Keys(spec.namespace)
    serial = 0
    per_send = max(1, BATCH // 8)
    while True:
        parts: list[bytes] = []
        for _ in range(per_send):
            serial += 1
            parts += run_commands(spec, keys, f"run_{os.getpid()}_{serial}")
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
