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
