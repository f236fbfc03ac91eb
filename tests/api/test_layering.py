"""An API replica runs no agent: it must start without the agent code (or the agent's packages)
and without the worker's, talking to runs only through Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_api_loads_no_agent_or_worker_module() -> None:
    code = "import sys, hermes_queue.api.app; print('\\n'.join(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    assert [m for m in loaded if m.startswith("hermes_queue.agents")] == []
    assert [m for m in loaded if m.startswith("hermes_queue.workers")] == []


def test_the_http_helpers_load_no_app_state() -> None:
    """api/http/ is given what it needs (a body timeout, the API key), so loading it loads
    neither the process's state nor Redis, the stream hub or the session store."""
    names = sorted(p.stem for p in (ROOT / "hermes_queue/api/http").glob("[!_]*.py"))
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}: importlib.import_module('hermes_queue.api.http.' + name)\n"
        "print('\\n'.join(sorted(sys.modules)))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    assert "hermes_queue.api.http.sse" in loaded
    forbidden = ("hermes_queue.api.state", "hermes_queue.streams", "hermes_queue.store", "redis")
    assert [m for m in loaded if m.startswith(forbidden)] == []
