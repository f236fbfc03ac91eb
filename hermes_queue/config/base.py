"""What every settings group is made of: the error a bad value raises (one line naming the
setting and its variable), a group's masked repr and its check, and the small field and range
helpers the groups share (``groups.py``, ``webhook_config.py``).
"""

from __future__ import annotations

from dataclasses import field, fields
from typing import Any

ENV_PREFIX = "HERMES_QUEUE_"


class ConfigError(ValueError):
    """A setting has a value that cannot be used; the message names the setting. The command
    line prints it as one ``error: …`` line and exits 2 (``cli/failures.py``)."""


def bad_value(name: str, shown: str, problem: str, expected: str) -> ConfigError:
    """The one line a bad value gets: the setting and its variable, the value as it may be
    shown (``shown``: passwords already masked), what is wrong and what was expected."""
    variable = ENV_PREFIX + name.upper()
    return ConfigError(f"setting {name} ({variable}) = {shown!r} {problem}; expected {expected}")


def named(name: str, default: Any) -> Any:
    """A field whose flat name (file key, ``HERMES_QUEUE_<NAME>``) differs from its own."""
    return field(default=default, metadata={"name": name})


def at_least(value: float, minimum: float, name: str) -> None:
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, not {value}")


def not_negative(value: float, name: str) -> None:
    if value < 0:
        raise ConfigError(f"{name} must be 0 (off) or positive, not {value}")


class Group:
    """What every group shares: a repr that masks secrets, a check of its own values."""

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.metadata.get("secret") and value:
                value = "***"
            shown.append(f"{f.name}={value!r}")
        return f"{type(self).__name__}({', '.join(shown)})"

    def validate(self) -> None:
        """Raise ``ConfigError`` naming the flat setting whose value cannot be used."""
