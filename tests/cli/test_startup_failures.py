"""A process given a bad setting, or unable to start, says so in one ``error: …`` line (the
setting, its value with passwords masked, what was expected) and exits 2 for configuration, 1
for the rest: no traceback (unless ``--debug``). Run as an operator runs them: real processes.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_queue.redisio.embedded import free_port
from tests.support.processes import child_env

EXPECTED_STORE = (
    "expected sqlite:///relative/path.db, sqlite:////absolute/path.db or postgresql://…"
)


def hq(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hermes_queue", *args],
        env=child_env(**env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one ``error: …`` line, the last on stderr; no traceback anywhere."""
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert result.stderr.rstrip().splitlines()[-1] == errors[0]
    return errors[0]


@pytest.mark.parametrize(
    ("command", "env", "line"),
    [
        (
            "api",
            {"HERMES_QUEUE_STORE_URL": "mysql://root:hunter2secret@db/x"},
            "error: setting store_url (HERMES_QUEUE_STORE_URL) = 'mysql://root:***@db/x' has "
            f"the unsupported scheme 'mysql'; {EXPECTED_STORE}",
        ),
        (
            "worker",
            {"HERMES_QUEUE_STORE_URL": "notaurl"},
            "error: setting store_url (HERMES_QUEUE_STORE_URL) = 'notaurl' is not a URL (no "
            f"scheme); {EXPECTED_STORE}",
        ),
        (
            "dev",
            {"HERMES_QUEUE_STORE_URL": "root:hunter2secret@db/x"},
            "error: setting store_url (HERMES_QUEUE_STORE_URL) = 'root:***@db/x' is not a URL",
        ),
        (
            "worker",
            {"HERMES_QUEUE_REDIS_URL": "http://127.0.0.1:6379"},
            "error: setting redis_url (HERMES_QUEUE_REDIS_URL) = 'http://127.0.0.1:6379' has "
            "the unsupported scheme 'http'; expected redis://host:port/db",
        ),
        (
            "api",
            {"HERMES_QUEUE_REDIS_URL": "redis://:hunter2secret@127.0.0.1:notaport/0"},
            "error: setting redis_url (HERMES_QUEUE_REDIS_URL) = "
            "'redis://:***@127.0.0.1:notaport/0' is malformed",
        ),
        (
            "api",
            {"HERMES_QUEUE_PORT": "eighty"},
            "error: setting port (HERMES_QUEUE_PORT) = 'eighty' is not a valid int; expected "
            "a whole number",
        ),
        (
            "migrate",
            {"HERMES_QUEUE_LEASE_SECONDS": "1"},
            "error: lease_seconds (1.0) must be more than twice heartbeat_seconds (1.0)",
        ),
        ("status", {"HERMES_QUEUE_PORTT": "1"}, "error: unknown setting HERMES_QUEUE_PORTT"),
        (
            "worker",
            {"HERMES_QUEUE_LOG_LEVEL": "loud"},
            "error: setting log_level (HERMES_QUEUE_LOG_LEVEL) = 'loud' is not a level; expected "
            "DEBUG, INFO, WARNING, ERROR, CRITICAL",
        ),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(
    command: str, env: dict[str, str], line: str, tmp_path: Path
) -> None:
    result = hq(command, env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert error_line(result).startswith(line)
    assert "hunter2secret" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


@pytest.mark.parametrize("command", ["api", "worker", "migrate"])
def test_a_sqlite_store_in_a_missing_directory_is_refused_not_created(
    command: str, tmp_path: Path
) -> None:
    """A typo in a SQLite path must not become a new, empty session store."""
    missing = tmp_path / "nonexistent" / "dir"
    result = hq(command, env={"HERMES_QUEUE_STORE_URL": f"sqlite:///{missing}/x.db"}, cwd=tmp_path)
    assert result.returncode == 2
    assert error_line(result) == (
        f"error: setting store_url (HERMES_QUEUE_STORE_URL) = 'sqlite:///{missing}/x.db' names "
        f"a file in {missing}, which does not exist; expected the path of a file in an existing "
        "directory (create it, or correct the path)"
    )
    assert not (tmp_path / "nonexistent").exists()


def test_the_default_store_directory_is_created(tmp_path: Path) -> None:
    """hermes-queue's own data directory (the default store_url's) is made on first use."""
    result = hq("migrate", env={}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / ".hermes-queue" / "hermes-queue.db").is_file()


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def test_a_port_in_use_is_one_line_and_exit_1(taken_port: int, tmp_path: Path) -> None:
    result = hq("api", "--port", str(taken_port), env={}, cwd=tmp_path)
    assert result.returncode == 1
    assert error_line(result) == (
        f"error: cannot listen on 127.0.0.1:{taken_port}: the port is already in use by another "
        "process; stop it, or set another port (HERMES_QUEUE_PORT or --port)"
    )


# A supervisor for ``hermes-queue dev``: it becomes the subreaper of everything dev starts, so a
# redis-server orphaned by dev is re-parented to it (not to init) and can be found and killed.
SUBREAPER = textwrap.dedent(
    """
    import ctypes, json, os, signal, subprocess, sys, time
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    mode, args = sys.argv[1], sys.argv[2:]
    dev = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if mode == "kill":  # SIGKILL dev once it is up: nothing stops its Redis but the kernel
        for line in dev.stdout:
            if line.startswith("  agent:"):
                break
        os.kill(dev.pid, signal.SIGKILL)
    out, err = dev.communicate(timeout=60)

    def children():
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                cmd = open(f"/proc/{pid}/cmdline").read().replace("\\0", " ")
            except OSError:
                continue
            if int(stat[1]) == os.getpid() and stat[0] != "Z":
                found.append((int(pid), cmd))
        return found

    deadline = time.monotonic() + 10
    while children() and time.monotonic() < deadline:  # a dying child may take a moment
        while True:  # reap what died (we are its parent now)
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        time.sleep(0.05)
    left = children()
    for pid, _cmd in left:
        os.kill(pid, signal.SIGKILL)
    print(json.dumps({"rc": dev.returncode, "stderr": err, "left": [c for _, c in left]}))
    """
)


DEV = (sys.executable, "-m", "hermes_queue", "dev")


def supervised_dev(mode: str, port: int, tmp_path: Path) -> dict[str, object]:
    finished = subprocess.run(
        [sys.executable, "-c", SUBREAPER, mode, *DEV, "--port", str(port)],
        env=child_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert finished.returncode == 0, finished.stderr
    report: dict[str, object] = json.loads(finished.stdout.strip().splitlines()[-1])
    return report


def test_a_failed_dev_leaves_no_redis_server_running(taken_port: int, tmp_path: Path) -> None:
    report = supervised_dev("wait", taken_port, tmp_path)
    assert report["rc"] == 1
    assert "the port is already in use" in str(report["stderr"])
    assert report["left"] == []  # its embedded redis-server was stopped


def test_a_killed_dev_takes_its_redis_server_with_it(tmp_path: Path) -> None:
    report = supervised_dev("kill", free_port(), tmp_path)
    assert report["rc"] == -9
    assert report["left"] == []  # killed by the kernel with its parent (PR_SET_PDEATHSIG)


@pytest.mark.parametrize("key", ["mysecretpassword123", "passwordpassword12", "adminadmin12345678"])
def test_a_weak_key_on_a_public_bind_is_refused_in_one_line(key: str, tmp_path: Path) -> None:
    env = {"HERMES_QUEUE_API_KEY": key}
    result = hq("api", "--host", "0.0.0.0", "--port", str(free_port()), env=env, cwd=tmp_path)
    assert result.returncode == 2
    line = error_line(result)
    assert line.startswith(
        "error: refusing to listen on 0.0.0.0: the API key (HERMES_QUEUE_API_KEY) is too "
        "predictable"
    )
    assert line.endswith("generate one with `openssl rand -hex 32`")
    assert key not in result.stderr
