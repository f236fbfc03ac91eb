"""What a backend offers beyond running turns: its skills and toolsets (HERMES_API §2).

API replicas never build a backend (they may not even have its package installed), so a worker
asks its backend for a :class:`BackendCatalog` and publishes it through Redis
(``runs/catalog.py``); the API serves ``GET /v1/skills`` and ``GET /v1/toolsets`` from it.

A backend offers a catalog by having an ``async catalog()`` method (:class:`CatalogSource`);
backends without one (``echo``, ``openai``) publish nothing, and the lists stay empty.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class BackendCatalog:
    """Items already in upstream's shapes, served as they are: a skill is
    ``{name, description, category, ...}``, a toolset is
    ``{name, label, description, enabled, configured, tools: [...]}``."""

    skills: list[dict[str, Any]]
    toolsets: list[dict[str, Any]]

    def to_bytes(self) -> bytes:
        """JSON: the items are JSON-shaped already, and ``redis-cli GET`` stays readable."""
        return json.dumps(
            {"skills": self.skills, "toolsets": self.toolsets},
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_bytes(cls, raw: bytes | str) -> BackendCatalog:
        """The inverse of :meth:`to_bytes`; ``ValueError`` when ``raw`` is not a catalog."""
        data = json.loads(raw)  # JSONDecodeError is a ValueError
        if not isinstance(data, dict):
            raise ValueError("a backend catalog must be a JSON object")
        return cls(skills=_items(data, "skills"), toolsets=_items(data, "toolsets"))


def _items(data: dict[str, Any], name: str) -> list[dict[str, Any]]:
    items = data.get(name, [])
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ValueError(f"backend catalog {name!r} must be a list of objects")
    return items


@runtime_checkable
class CatalogSource(Protocol):
    """A backend that can say what it offers. Called by the worker at startup and then
    periodically, never during a turn; it may read disk or configuration, but must not raise
    for a merely empty catalog (return empty lists)."""

    async def catalog(self) -> BackendCatalog: ...
