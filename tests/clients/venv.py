"""The Python 3.13 interpreter that runs the strict third-party client (it needs Python >= 3.13,
the suite runs on 3.11).

``HERMES_QUEUE_TEST_CLIENTS_PYTHON`` names a ready interpreter (CI builds one first with
``python -m tests.clients.venv``, which prints its path). Without it a virtual environment is
built once under ``~/.cache/hermes-queue/clients-venv-py313`` from the first Python 3.13 found
(``python3.13`` on PATH, else ``pyenv prefix 3.13``), reused while it works, re-created when it
does not. Only the standard library is used here, so CI can run it before installing anything.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

CLIENT_PACKAGE = "hermes-agent-api-client"
CLIENT_VERSION = "0.3.3"
PYTHON_VAR = "HERMES_QUEUE_TEST_CLIENTS_PYTHON"
VENV_DIR = Path.home() / ".cache" / "hermes-queue" / "clients-venv-py313"

# Prints the interpreter's version and the installed client's version, or fails.
_PROBE = (
    "import sys, importlib.metadata as m; "
    f"print('%d.%d' % sys.version_info[:2], m.version({CLIENT_PACKAGE!r}))"
)


class ClientsPythonError(RuntimeError):
    """No Python 3.13 with the client could be found or built (the message says why)."""


def _run(args: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)


def _is_python313(executable: str) -> bool:
    try:
        done = _run([executable, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.strip() == "3.13"


def problem_with(executable: str) -> str | None:
    """Why ``executable`` cannot run the client (None: it can)."""
    try:
        done = _run([executable, "-c", _PROBE])
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{executable} does not run: {error}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"{executable} cannot import {CLIENT_PACKAGE}: {last}"
    version, _, installed = done.stdout.strip().partition(" ")
    if version != "3.13":
        return f"{executable} is Python {version}, not 3.13"
    if installed != CLIENT_VERSION:
        return f"{executable} has {CLIENT_PACKAGE} {installed}, not {CLIENT_VERSION}"
    return None


def find_python313() -> str:
    """A working Python 3.13: ``python3.13`` on PATH, else pyenv's 3.13."""
    candidates: list[str] = []
    if on_path := shutil.which("python3.13"):
        candidates.append(on_path)  # may be a pyenv shim that refuses to run: checked below
    if shutil.which("pyenv"):
        try:
            prefix = _run(["pyenv", "prefix", "3.13"])
        except (OSError, subprocess.TimeoutExpired):
            prefix = None
        if prefix is not None and prefix.returncode == 0:
            for line in prefix.stdout.split(os.pathsep):
                candidates += [
                    str(Path(line.strip()) / "bin" / n) for n in ("python3.13", "python")
                ]
    for candidate in candidates:
        if _is_python313(candidate):
            return candidate
    raise ClientsPythonError(
        f"the strict client ({CLIENT_PACKAGE}=={CLIENT_VERSION}) needs Python 3.13, and none was "
        f"found (tried {candidates or 'nothing: no python3.13 on PATH, no pyenv'}). Install "
        f"one (e.g. `pyenv install 3.13`), or set {PYTHON_VAR} to a Python 3.13 that has "
        f"{CLIENT_PACKAGE}=={CLIENT_VERSION}."
    )


def _venv_python(directory: Path) -> Path:
    return directory / "bin" / "python"


def build(directory: Path = VENV_DIR) -> str:
    """The venv's python, built (or re-built) when missing or broken; one builder at a time."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f"{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run building the same venv: wait for it
        python = _venv_python(directory)
        if python.exists() and problem_with(str(python)) is None:
            return str(python)
        base = find_python313()
        shutil.rmtree(directory, ignore_errors=True)
        steps = [
            [base, "-m", "venv", str(directory)],
            [str(python), "-m", "pip", "install", "-q", f"{CLIENT_PACKAGE}=={CLIENT_VERSION}"],
        ]
        for step in steps:
            done = _run(step, timeout=600)
            if done.returncode != 0:
                raise ClientsPythonError(
                    f"building the clients venv failed at {' '.join(step)}:\n"
                    f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
                )
        if problem := problem_with(str(python)):
            raise ClientsPythonError(f"the clients venv was built but is not usable: {problem}")
        return str(python)


def clients_python() -> str:
    """``HERMES_QUEUE_TEST_CLIENTS_PYTHON`` when set (it must work), else the cached venv."""
    named = os.environ.get(PYTHON_VAR)
    if named:
        if problem := problem_with(named):
            raise ClientsPythonError(f"{PYTHON_VAR}={named} cannot run the client: {problem}")
        return named
    return build()


if __name__ == "__main__":
    try:
        print(clients_python() if "--build" not in sys.argv else build())
    except ClientsPythonError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
