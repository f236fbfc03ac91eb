"""A run's ``execution_policy`` on the Hermes agent (agents/base.py ``TurnLimits``), as upstream
shrinks the profile it built an agent from: never past what the deployment allows."""

from __future__ import annotations

from collections.abc import Sequence

from hermes_queue.agents.base import TurnLimits


def turn_toolsets(deployed: Sequence[str], limits: TurnLimits) -> list[str]:
    """The toolsets the turn's agent is built with: the deployment's, narrowed to the policy's
    (a toolset the deployment does not enable is not offered, whatever the policy names)."""
    if limits.toolsets is None:
        return list(deployed)
    return sorted(set(deployed) & set(limits.toolsets))


def turn_iterations(deployed: int, limits: TurnLimits) -> int:
    """The turn's model-call limit (Hermes' ``max_iterations``, which it reads each turn): the
    deployment's, or the policy's ``max_turns`` when lower."""
    if limits.max_turns is None:
        return deployed
    return min(deployed, limits.max_turns)
