"""The clients of ``bench/rollout.py``, each running turns one after another until told to
stop: ``openai`` (the openai SDK's streaming chat completion, which cannot resume), ``session``
(a session chat stream read to its end, without resuming) and ``runs`` (``POST /v1/runs`` and
its events, resuming with ``Last-Event-ID``); what they saw, per kind (:class:`Tally`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import aiohttp
import openai

from hermes_queue.client import HermesQueueClient, iter_sse

API_KEY = "bench-rollout-" + "k" * 20
KINDS = ("openai", "session", "runs")


@dataclass
class Tally:
    """What the clients saw, per kind."""

    completed: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    cut: Counter[str] = field(default_factory=Counter)
    resumes: Counter[str] = field(default_factory=Counter)
    non_2xx: Counter[str] = field(default_factory=Counter)
    durations: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Clients:
    """The three kinds of clients, each running turns until told to stop."""

    def __init__(self, base: str, text: str, max_turns: int) -> None:
        self.base, self.text, self.max_turns = base, text, max_turns
        self.tally = Tally()
        self.stop = asyncio.Event()
        self.in_turn: set[str] = set()

    async def run(self, kind: str, index: int) -> None:
        name = f"{kind}{index}"
        for _ in range(self.max_turns):
            if self.stop.is_set():
                return
            self.in_turn.add(name)
            started = time.monotonic()
            try:
                ok = await getattr(self, f"_{kind}")(name)
            except Exception as exc:  # every failure is a finding, never a crash
                self.tally.errors.append(f"{name}: {exc!r}")
                ok = False
            if ok:
                self.tally.completed[kind] += 1
                self.tally.durations.append(time.monotonic() - started)
            else:
                self.tally.failed[kind] += 1

    async def _openai(self, name: str) -> bool:
        client = openai.AsyncOpenAI(base_url=self.base + "/v1", api_key=API_KEY, max_retries=0)
        finish = None
        try:
            stream = await client.chat.completions.create(
                model="hermes-agent",
                messages=[{"role": "user", "content": self.text}],
                stream=True,
            )
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].finish_reason:
                    finish = chunk.choices[0].finish_reason
        except openai.APIStatusError as exc:
            self.tally.non_2xx[f"openai {exc.status_code}"] += 1
            return False
        except openai.APIError as exc:
            self.tally.cut["openai"] += 1
            self.tally.errors.append(f"{name}: {exc!r}")
            return False
        finally:
            await client.close()
        if finish != "stop":
            self.tally.cut["openai"] += 1
        return finish == "stop"

    async def _session(self, name: str) -> bool:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        session_id = f"{name}-{uuid.uuid4().hex[:8]}"
        timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
        async with aiohttp.ClientSession(headers=headers, timeout=timeout) as http:
            async with http.post(f"{self.base}/api/sessions", json={"id": session_id}) as made:
                if made.status != 201:
                    self.tally.non_2xx[f"session create {made.status}"] += 1
                    return False
            url = f"{self.base}/api/sessions/{session_id}/chat/stream"
            try:
                async with http.post(url, json={"message": self.text}) as response:
                    if response.status != 200:
                        self.tally.non_2xx[f"session chat {response.status}"] += 1
                        return False
                    events = [f.event async for f in iter_sse(response) if f.data]
            except (aiohttp.ClientError, TimeoutError) as exc:
                self.tally.cut["session"] += 1
                self.tally.errors.append(f"{name}: {exc!r}")
                return False
        if "done" not in events or "run.completed" not in events:
            self.tally.cut["session"] += 1
            return False
        return True

    async def _runs(self, name: str) -> bool:
        async with HermesQueueClient(self.base, API_KEY, reconnect_delay=0.2) as client:
            try:
                run_id = await client.create_run(self.text)
            except Exception as exc:
                self.tally.non_2xx[f"runs create {exc}"[:60]] += 1
                return False
            last = None
            async for _id, payload in client.iter_events(run_id):
                last = payload.get("event")
            return last == "run.completed"
