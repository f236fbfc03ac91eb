"""Upstream's own API server as a test peer: hermes-agent's gateway, run as a user runs it
(``python -m hermes_cli.main gateway run``), with only the ``api_server`` platform, in a private
``HERMES_HOME`` whose ``config.yaml`` points the model at an OpenAI-compatible fake.

Upstream refuses to start its API server without a strong key (upstream-api.md §1.1); its keyless
mode exists only for its own tests. ``UpstreamGateway(api_key="")`` reaches that mode for the
tests that need it (what upstream does with ``X-Hermes-Session-Key`` on a server without a
key) by lifting that one start-up check before the gateway runs; nothing else is changed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from hermes_queue.redisio.embedded import free_port
from tests.support.processes import child_env, terminate, wait_http

# Hermes' and its API server's own variables: none reaches upstream (nor our hermes agents).
HERMES_PREFIXES = ("HERMES_", "API_SERVER_")
CONTEXT_LENGTH = 131_072  # pinned, so Hermes never probes the fake for the model's window

# The keyless launcher: upstream's CLI, with the API server's key check lifted.
_KEYLESS = (
    "import sys, gateway.platforms.api_server as api_server\n"
    "api_server.APIServerAdapter._api_key_passes_startup_guard = lambda self: True\n"
    "from hermes_cli.main import main\n"
    "sys.argv = ['hermes', 'gateway', 'run']\n"
    "sys.exit(main())\n"
)


def hermes_config(
    llm_base_url: str, llm_key: str, model: str, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ``config.yaml`` an agent of either side reads: the fake as Hermes' generic custom
    endpoint, and nothing a config can turn off left on (no kanban dispatcher; external
    memory, cron providers and MCP servers are off by default)."""
    config: dict[str, Any] = {
        "model": {
            "default": model,
            "provider": "custom",
            "base_url": llm_base_url,
            "api_key": llm_key,
            "context_length": CONTEXT_LENGTH,
        },
        "kanban": {"dispatch_in_gateway": False},
    }
    config.update(extra or {})
    return config


def write_hermes_home(home: Path, config: dict[str, Any]) -> Path:
    """``home`` (created if needed) holding ``config.yaml``."""
    home.mkdir(parents=True, exist_ok=True)
    # JSON is YAML: no YAML writer needed.
    (home / "config.yaml").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return home


class UpstreamGateway:
    """One upstream API server on a free loopback port; ``await wait_ready()`` before use."""

    def __init__(
        self,
        llm_base_url: str,
        home: Path,
        *,
        llm_key: str,
        model: str,
        api_key: str,
        api_server: dict[str, Any] | None = None,
        extra_config: dict[str, Any] | None = None,
    ) -> None:
        self.port = free_port()
        extra = {"host": "127.0.0.1", "port": self.port, **(api_server or {})}
        if api_key:
            extra["key"] = api_key
        platforms = {"platforms": {"api_server": {"enabled": True, "extra": extra}}}
        config = hermes_config(llm_base_url, llm_key, model, {**platforms, **(extra_config or {})})
        self.home = write_hermes_home(home, config)
        launcher = ["-c", _KEYLESS] if not api_key else ["-m", "hermes_cli.main", "gateway", "run"]
        self.command = [sys.executable, *launcher]
        self.log_path = self.home / "gateway-stdout.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.command,
                env=child_env(strip=HERMES_PREFIXES, checkout=False, HERMES_HOME=str(self.home)),
                cwd=self.home,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.base_url = f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def wait_ready(self, within: float = 90.0) -> None:
        await wait_http(
            self.base_url + "/health", self.proc, "upstream's gateway", log=self.log, within=within
        )

    def stop(self) -> None:
        terminate(self.proc, 30)
