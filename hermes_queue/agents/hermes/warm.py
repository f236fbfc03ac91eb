"""Agents kept warm between turns, one per recent session, in one worker process; and what a
worker warms up before its first turn (``warm_first_turn``).

Building Hermes' ``AIAgent`` is most of a short turn's CPU (tool schemas, the system prompt,
provider clients, context-length probing). Hermes' own gateway keeps the agent of a session
between its messages; a worker does the same, within a bound. A session's turns may land on
any worker, so this is only a cache: a miss builds a new agent, nothing depends on a hit.

An agent is taken out while a turn uses it (two concurrent turns of one session never share
one) and put back only after a turn that ended normally. The signature covers everything the
agent was built from (provider, model, endpoint, key fingerprint, toolsets, instructions,
fallback); per-turn settings (callbacks, reasoning, service tier) are set on it every turn.
Only the event loop's thread touches this object, so it needs no lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

# What a turn imports on first use: Hermes' conversation loop and its trackers, the openai
# SDK's resources and stream helpers (~300 modules, most of a cold turn's time to first token).
_FIRST_TURN_MODULES = (
    "agent.conversation_loop",
    "agent.chat_completion_helpers",
    "agent.turn_finalizer",
    "agent.stream_single_writer",
    "agent.aux_accounting",
    "agent.credits_tracker",
    "agent.kanban_stop",
    "agent.rate_limit_tracker",
    "agent.verification_stop",
    "agent.verify_hooks",
    "hermes_cli.moa_config",
    "hermes_cli.skin_engine",
    "tools.hook_output_spill",
    "tools.skill_provenance",
    "openai.resources",
    "openai.lib.streaming.chat",
    "unittest.mock",
)


def signature(parts: Mapping[str, Any], api_key: str) -> str:
    """A stable fingerprint of an agent's construction inputs (the key only as a hash)."""
    blob = json.dumps(
        {**parts, "api_key": hashlib.sha256(api_key.encode()).hexdigest() if api_key else ""},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


class WarmAgents:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._agents: OrderedDict[str, tuple[str, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._agents)

    def take(self, session_id: str, sig: str) -> tuple[Any | None, list[Any]]:
        """The session's warm agent if it was built the same way (it leaves the cache), and
        the agents to release: one built for another route or toolset is of no further use."""
        entry = self._agents.pop(session_id, None)
        if entry is None:
            return None, []
        if entry[0] != sig:
            return None, [entry[1]]
        return entry[1], []

    def put(self, session_id: str, sig: str, agent: Any) -> list[Any]:
        """Keep ``agent`` for the session's next turn; returns the agents evicted for room."""
        if self.capacity <= 0:
            return [agent]
        evicted = []
        previous = self._agents.pop(session_id, None)
        if previous is not None:
            evicted.append(previous[1])
        self._agents[session_id] = (sig, agent)
        while len(self._agents) > self.capacity:
            evicted.append(self._agents.popitem(last=False)[1][1])
        return evicted

    def drain(self) -> list[Any]:
        """Everything, for shutdown."""
        agents = [agent for _, agent in self._agents.values()]
        self._agents.clear()
        return agents


def warm_first_turn(agent: Any) -> None:
    """What a worker's first turn would pay once for the whole process, paid at warm-up with a
    throw-away agent: the system prompt's first build (it probes the host's toolchain in
    subprocesses, ~1 s, and indexes skills; both cached process-wide) and the modules a turn
    imports on first use. Names that a Hermes release moved are skipped."""
    build_prompt = getattr(agent, "_build_system_prompt", None)
    if callable(build_prompt):
        build_prompt()
    for name in _FIRST_TURN_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
