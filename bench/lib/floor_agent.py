"""The floor's process: the bare Hermes ``AIAgent`` turn, with no HTTP, no Redis and no store.

``bench/floor.py`` starts this as a child process (so it has a ``HERMES_HOME`` of its own and
its CPU is counted alone) and sends it one JSON command per stdin line; each answer is one JSON
line.

The agent is built exactly as the worker's ``hermes`` backend builds it: the same
``HermesBackend`` (its process preparation, its ``AgentFactory.build`` with the same arguments,
toolsets and ephemeral system prompt) and the same per-turn call (``conversation.converse``,
which binds Hermes' per-turn session context around ``run_conversation``). What is left out is
what the machinery adds: the event loop, the callbacks' hop to it, Redis, the store and HTTP. A
conversation keeps its agent between turns (the worker's warm-agent cache, on a hit) and its
history in memory (the worker reads it from the store).

Commands (stdin, one JSON object per line):
- ``{"conversations": C, "turns": T, "concurrency": K}``: C conversations of T turns, K at a
  time, each in a thread; answers turns done, failures, CPU seconds of this process over the
  window (``time.process_time``: every thread), wall time, and per turn the time from the call
  to the first streamed token (TTFT) and to the end.
- ``{"quit": true}``.

    python -m bench.lib.floor_agent '<spec JSON>'   # spec: hermes_home, base_url, api_key, model
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.lib.traffic import PROMPT
from hermes_queue.agents.base import AgentRequest
from hermes_queue.agents.hermes.backend import HermesBackend
from hermes_queue.agents.hermes.construction import prepare_turn
from hermes_queue.agents.hermes.conversation import converse

PROVIDER = "fake"


class FirstToken:
    """Stands in for the worker's ``TurnBridge``: notes when the first token streamed."""

    def __init__(self) -> None:
        self.first: float | None = None

    def on_delta(self, text: str | None) -> None:
        if text and self.first is None:
            self.first = time.perf_counter()

    def on_reasoning(self, text: str | None) -> None:
        pass

    def on_progress(self, *args: Any, **kwargs: Any) -> None:
        pass

    def on_tool_start(self, *args: Any) -> None:
        pass

    def on_tool_complete(self, *args: Any) -> None:
        pass

    def on_approval(self, data: dict[str, Any]) -> None:
        pass


class Floor:
    def __init__(self, spec: dict[str, Any]) -> None:
        options = {
            "providers": {PROVIDER: {"base_url": spec["base_url"]}},
            "default_provider": PROVIDER,
            "credentials": lambda _name: spec["api_key"],
            "default_model": spec["model"],
            "hermes_home": spec["hermes_home"],
            "toolsets": spec.get("toolsets") or (),
            "agent_cache_size": 0,
        }
        self.backend = HermesBackend.from_options(options)

    def build(self, session_id: str) -> Any:
        request = AgentRequest(run_id=f"run_{uuid.uuid4().hex}", session_id=session_id, message="")
        backend = self.backend
        return backend.agents.build(backend.agents.runtime(request), request, backend.toolsets)

    def conversation(self, turns: int) -> tuple[list[tuple[float, float]], list[str]]:
        """One conversation's turns in order: (ttft, total) per turn, and problems."""
        session_id = f"floor-{uuid.uuid4().hex[:12]}"
        agent: Any = None
        history: list[dict[str, Any]] = []
        samples: list[tuple[float, float]] = []
        problems: list[str] = []
        for index in range(1, turns + 1):
            probe = FirstToken()
            started = time.perf_counter()
            try:
                if agent is None:  # built in the turn, as the worker does on a cache miss
                    agent = self.build(session_id)
                prepare_turn(agent, probe, None)  # type: ignore[arg-type]
                result = converse(
                    agent,
                    probe,  # type: ignore[arg-type]
                    f"run_{uuid.uuid4().hex}",
                    session_id,
                    PROMPT.format(index=index),
                    history,
                )
            except Exception as exc:
                problems.append(repr(exc)[:200])
                break
            ended = time.perf_counter()
            reply = str(result.get("final_response") or "")
            if result.get("failed") or not reply.rstrip().endswith(f"u{index}"):
                problems.append(f"turn {index}: {reply[-60:]!r} {result.get('error')!r}")
                break
            history = list(result.get("messages") or [])
            first = probe.first if probe.first is not None else ended
            samples.append((first - started, ended - started))
        return samples, problems

    def run(self, conversations: int, turns: int, concurrency: int) -> dict[str, Any]:
        lock = threading.Lock()
        samples: list[tuple[float, float]] = []
        problems: list[str] = []

        def one() -> None:
            got, bad = self.conversation(turns)
            with lock:
                samples.extend(got)
                problems.extend(bad)

        cpu, wall = time.process_time(), time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            for future in [pool.submit(one) for _ in range(conversations)]:
                future.result()
        return {
            "ok": len(samples),
            "failures": problems,
            "cpu_s": time.process_time() - cpu,
            "wall_s": time.perf_counter() - wall,
            "ttft_s": [s[0] for s in samples],
            "total_s": [s[1] for s in samples],
        }


def main() -> None:
    floor = Floor(json.loads(sys.argv[1]))
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("quit"):
            break
        result = floor.run(command["conversations"], command["turns"], command["concurrency"])
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
