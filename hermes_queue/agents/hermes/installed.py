"""What the workers' Hermes has installed: its skills and toolsets, in upstream's ``/v1/skills``
and ``/v1/toolsets`` shapes (the backend's :class:`~hermes_queue.catalog.BackendCatalog`).

The lists come from Hermes itself (its installed skills under ``HERMES_HOME``, its toolset
registry and config), with ``enabled`` meaning what this backend's agents actually get: the
toolsets from settings, or Hermes' api_server default.
"""

from __future__ import annotations

from typing import Any

from hermes_queue.catalog import BackendCatalog


def hermes_catalog(enabled_toolsets: list[str]) -> BackendCatalog:
    """Blocking (reads Hermes' config and skill files): call it from a thread."""
    from hermes_cli.config import load_config
    from hermes_cli.tools_config import _get_effective_configurable_toolsets, _toolset_has_keys
    from tools.skills_tool import _find_all_skills, _sort_skills
    from toolsets import resolve_toolset

    skills = [dict(skill) for skill in _sort_skills(_find_all_skills(skip_disabled=False))]
    config = load_config()
    enabled = set(enabled_toolsets)
    toolsets: list[dict[str, Any]] = []
    for name, label, description in _get_effective_configurable_toolsets():
        try:
            tools = sorted(set(resolve_toolset(name)))
        except Exception:  # a toolset Hermes lists but cannot expand: shown without tools
            tools = []
        toolsets.append(
            {
                "name": name,
                "label": label,
                "description": description,
                "enabled": name in enabled,
                "configured": bool(_toolset_has_keys(name, config)),
                "tools": tools,
            }
        )
    return BackendCatalog(skills=skills, toolsets=toolsets)
