"""The run scripts' calls as the project itself makes them, recorded once per call shape, for
load that must not pay the project's Python per call (``capacity_load``'s raw ``EVALSHA``).

Nothing here lists a script's keys or arguments. A :class:`RunRepository` (``create``,
``claim``) and the :class:`Attempt` its claim returns (``append``, ``complete``) make each call,
on a stand-in client that keeps the call (the script's text as registered, ``EVALSHA``'s words
as redis-py encodes them) instead of sending it, and answers it as the script would. The run id
and an append's batch token are stand-ins (:data:`RUN`, :data:`TOKEN`); :meth:`Call.packed`
puts a real run's values in their place. So when a script gains a key or an argument, the
bench calls it as the repository does, with nothing of its own to keep in step.

The stand-ins hold for a run's keys only where they name the run by its id alone, which is so
without a cluster's virtual shards (``Keys(cluster=False)``, what the capacity bench uses, a
hash tag in the namespace placing every key on one primary): :func:`run_calls` refuses others.
Times the project takes from the clock (``ts``, this minute's stats key) are those of the
recording.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from hermes_queue.config.groups import RunSettings
from hermes_queue.events import EventType
from hermes_queue.keys import Keys
from hermes_queue.redisio.pipeline import PipelinedConnection
from hermes_queue.runs.attempt import Attempt
from hermes_queue.runs.model import NewRun, RunStatus
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest

RUN = "run_bench_stand_in"  # where a run id goes
TOKEN = "bench_token_stand_in"  # where an append's batch token goes
_RUN, _TOKEN = RUN.encode(), TOKEN.encode()

# The input and reply of the runs recorded (a 20-word echo turn, as ``bench/redis_cost.py``).
MESSAGE = "word " * 20
REPLY = "Echo: " + "word " * 20
USAGE = {"input_tokens": 20}
WORKER = "bench-worker"

T = TypeVar("T")


def bulk(word: bytes) -> bytes:
    """One RESP bulk string."""
    return b"$%d\r\n%s\r\n" % (len(word), word)


class Call:
    """One script call: ``EVALSHA sha numkeys keys… args…`` with stand-ins for a run's values,
    packed as RESP for any run by :meth:`packed`; ``script`` is the text to load first."""

    def __init__(self, script: str, words: list[bytes]) -> None:
        self.script = script
        self.words = words
        self.sha = words[1].decode()
        # Packed once: constant runs of words between the words holding a stand-in.
        self._parts: list[bytes] = []  # constant, word with stand-ins, constant, …, constant
        constant = [b"*%d\r\n" % len(words)]
        for word in words:
            if _RUN in word or _TOKEN in word:
                self._parts += [b"".join(constant), word]
                constant = []
            else:
                constant.append(bulk(word))
        self._parts.append(b"".join(constant))

    def packed(self, run_id: str, token: str = "") -> bytes:
        """The call for the run ``run_id`` (and, for an append, the batch token ``token``)."""
        run, batch = run_id.encode(), token.encode()
        parts = self._parts
        out = [parts[0]]
        for index in range(1, len(parts), 2):
            out.append(bulk(parts[index].replace(_TOKEN, batch).replace(_RUN, run)))
            out.append(parts[index + 1])
        return b"".join(out)


class _Recorder(aioredis.Redis):
    """A client that keeps the script calls made on it instead of sending them (it never
    connects), answering each with ``reply``, and the text of every script registered."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: dict[str, str] = {}
        self.calls: list[list[bytes]] = []
        self.reply: Any = None
        # How redis-py would encode each word (its pool's encoder; redis-py leaves it untyped).
        self.encoder = self.connection_pool.get_encoder()  # type: ignore[no-untyped-call]

    def register_script(self, script: Any) -> Any:
        registered = super().register_script(script)
        self.texts[registered.sha] = script if isinstance(script, str) else script.decode()
        return registered

    async def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        encode = self.encoder.encode
        self.calls.append([encode(word) for word in ("EVALSHA", sha, numkeys, *keys_and_args)])
        return self.reply


class _RecordedAppends(PipelinedConnection):
    """An attempt's append connection (``FencedScripts.appends``), kept by the recorder."""

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__(recorder, "bench-recorder")
        self.recorder = recorder

    async def evalsha(
        self, script: AsyncScript, keys: list[Any], args: list[Any], *, asking: bool = False
    ) -> Any:
        return await self.recorder.evalsha(script.sha, len(keys), *keys, *args)


class _Recording:
    """A repository on the recorder, and the one call each of its steps makes."""

    def __init__(self, keys: Keys) -> None:
        if keys.cluster:
            raise ValueError("recorded calls stand in for run ids only without virtual shards")
        self.recorder = _Recorder()
        self.repository = RunRepository(self.recorder, keys, RunSettings())

    async def call(self, reply: Any, step: Awaitable[T]) -> tuple[T, Call]:
        """``step`` (one project call), answered with ``reply``: its result and its call."""
        recorder = self.recorder
        recorder.reply, before = reply, len(recorder.calls)
        result = await step
        made = recorder.calls[before:]
        if len(made) != 1:
            raise RuntimeError(f"expected one script call, the project made {len(made)}")
        words = made[0]
        if _RUN not in b"".join(words):
            raise RuntimeError(f"a recorded call does not name its run: {words[:4]!r}")
        return result, Call(recorder.texts[words[1].decode()], words)

    async def claimed(self) -> tuple[Attempt, Call, Call]:
        """The run :data:`RUN` created and claimed: its attempt, and the two calls."""
        run = NewRun(RUN, "bench", TurnRequest(message=MESSAGE))
        created, create = await self.call(1, self.repository.create(run))
        # claim.lua's reply: 'claimed', then the record's fields as it left them.
        record = {**run.fields(), "attempt": "1", "status": RunStatus.RUNNING, "worker": WORKER}
        reply = ["claimed", *(item for pair in record.items() for item in pair)]
        attempt, claim = await self.call(reply, self.repository.claim(RUN, WORKER))
        if not created or attempt is None:
            raise RuntimeError("the recorded create or claim did not take")
        attempt.scripts.appends = _RecordedAppends(self.recorder)
        return attempt, create, claim

    async def append(self, attempt: Attempt, events: list[tuple[str, dict[str, Any]]]) -> Call:
        ids, call = await self.call([b"1-0"] * len(events), attempt.append(events, TOKEN))
        if ids is None:
            raise RuntimeError("the recorded append did not take")
        return call


async def _run_calls(keys: Keys) -> dict[str, Call]:
    recording = _Recording(keys)
    attempt, create, claim = await recording.claimed()
    started: list[tuple[str, dict[str, Any]]] = [
        (EventType.MESSAGE_STARTED, {"message_id": f"msg_{RUN}"})
    ]
    first = await recording.append(attempt, started)
    done, finish = await recording.call(
        1, attempt.complete(output=REPLY, usage=USAGE, messages=[], runtime=None)
    )
    if not done:
        raise RuntimeError("the recorded completion did not take")
    return {"create": create, "claim": claim, "first_append": first, "finish": finish}


async def _append_call(keys: Keys, events: list[tuple[str, dict[str, Any]]]) -> Call:
    recording = _Recording(keys)
    attempt, _, _ = await recording.claimed()
    return await recording.append(attempt, events)


def run_calls(keys: Keys) -> dict[str, Call]:
    """A run's script calls as the API and a worker make them: ``create``
    (``RunRepository.create``), ``claim`` (``RunRepository.claim``), ``first_append``
    (``Attempt.append`` of ``message.started``, batch token ``<run id>.0``) and ``finish``
    (``Attempt.complete`` with a 20-word reply: ``assistant.completed``, ``run.completed``)."""
    return asyncio.run(_run_calls(keys))


def append_call(keys: Keys, events: list[tuple[str, dict[str, Any]]]) -> Call:
    """``Attempt.append`` of ``events`` by a run's first attempt (its batch token
    :data:`TOKEN`)."""
    return asyncio.run(_append_call(keys, events))
