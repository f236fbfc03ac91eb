"""The echo backend's fake tools, whose every execution is counted where a test can see it.

A durable-steps test kills workers mid-turn and must tell "this tool ran once" from "it ran
again on the next worker". Each real execution appends two lines to the tool log (its start
before the work, its end after), and each model call the backend makes one (``model``). Lines
are appended and fsynced before the backend goes on, so a line survives the SIGKILL of the
process that wrote it; lines of several processes on one host interleave whole (one ``write``
each, under the filesystem's append semantics). Processes also keep their own tally
(``ToolLog.executions``) for in-process tests.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ToolLog:
    """Where executions are told: ``path`` (JSON lines; none: in-process tally only)."""

    path: str = ""
    executions: Counter[tuple[str, str]] = field(default_factory=Counter)

    def model_call(self, run_id: str, index: int, attempt: int) -> None:
        """A model call the echo backend made (one per step of a tool turn, one for the
        reply): benchmarks count the ones made twice."""
        self._write("model", run_id, f"model_{index}", "", attempt)

    def started(self, run_id: str, call_id: str, tool: str, attempt: int) -> None:
        self.executions[(run_id, call_id)] += 1
        self._write("start", run_id, call_id, tool, attempt)

    def ended(self, run_id: str, call_id: str, tool: str, attempt: int) -> None:
        self._write("end", run_id, call_id, tool, attempt)

    def _write(self, phase: str, run_id: str, call_id: str, tool: str, attempt: int) -> None:
        if not self.path:
            return
        line = {
            "phase": phase,
            "run_id": run_id,
            "call_id": call_id,
            "tool": tool,
            "attempt": attempt,
            "pid": os.getpid(),
            "ts": time.time(),
        }
        data = (json.dumps(line) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)


def read_tool_log(path: str | Path) -> list[dict[str, Any]]:
    """Every line a tool log holds (for tests and benchmarks)."""
    log = Path(path)
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def tool_call_message(call_id: str, tool: str, args: Any) -> dict[str, Any]:
    """The assistant message that asks for one call, as the transcript keeps it."""
    call = {"name": tool, "arguments": json.dumps(args)}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": call_id, "type": "function", "function": call}],
        "timestamp": time.time(),
    }


def tool_message(call_id: str, tool: str, content: str) -> dict[str, Any]:
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "tool_name": tool,
        "content": content,
        "timestamp": time.time(),
    }
