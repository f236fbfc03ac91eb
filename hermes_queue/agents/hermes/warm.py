"""Agents kept warm between turns, one per recent session, in one worker process.

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

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any


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
