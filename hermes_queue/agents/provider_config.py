"""A provider as a backend sees it at turn time: endpoint, api mode, limits and, once resolved
by the worker for the turn's provider only, its key (which ``repr`` and ``scrub`` keep out of
logs and client-visible text). Shared by the ``openai`` and ``hermes`` backends."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hermes_queue.agents.base import ProviderAuthError
from hermes_queue.providers import CredentialsUnavailable


@dataclass(frozen=True, repr=False)
class ProviderConfig:
    """Where and how to reach one OpenAI-compatible provider; the key never leaves the worker."""

    name: str
    base_url: str
    api_key: str = ""
    api_mode: str = "chat_completions"
    timeout: float = 60.0  # seconds without a byte (headers or body) before giving up
    max_retries: int = 3

    def __post_init__(self) -> None:
        if self.api_mode != "chat_completions":
            raise ValueError(f"provider {self.name!r}: unsupported api_mode {self.api_mode!r}")
        if self.timeout <= 0 or self.max_retries < 0:
            raise ValueError(f"provider {self.name!r}: timeout must be > 0 and max_retries >= 0")
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))

    def __repr__(self) -> str:
        fields = {**vars(self), "api_key": "***" if self.api_key else ""}
        return f"ProviderConfig({', '.join(f'{k}={v!r}' for k, v in fields.items())})"

    def scrub(self, text: str) -> str:
        """Remove the key from text bound for a client or a log."""
        return text.replace(self.api_key, "***") if self.api_key else text


def provider_configs(options: Mapping[str, Any]) -> dict[str, ProviderConfig]:
    """The ``providers`` backend option (name -> settings dict or config) as configs."""
    return {
        name: p if isinstance(p, ProviderConfig) else ProviderConfig(**{"name": name, **p})
        for name, p in dict(options.get("providers") or {}).items()
    }


def with_credentials(
    provider: ProviderConfig, credentials: Callable[[str], str] | None
) -> ProviderConfig:
    """The provider with its key resolved now (by the worker's settings); credentials that
    cannot be resolved are the turn's ``ProviderAuthError``: it fails closed."""
    if credentials is None:
        return provider
    try:
        return dataclasses.replace(provider, api_key=credentials(provider.name))
    except CredentialsUnavailable as exc:
        raise ProviderAuthError(str(exc)) from None
