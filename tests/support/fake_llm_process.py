"""The fake LLM in its benchmark form (:meth:`FakeLLM.for_benchmarks`), in a process of its own
so its CPU is never counted as a server's:

    python -m tests.support.fake_llm_process --port 0 [--token-delay 0] [--log FILE]

prints ``FAKE_LLM_READY <port>`` once it listens and serves until it is terminated.
:class:`FakeLLMProcess` starts it and reads its counts (``GET /_stats``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys

import aiohttp

from tests.support.fake_llm import FakeLLM
from tests.support.processes import REPO_ROOT, child_env, terminate

MODULE = "tests.support.fake_llm_process"
READY = "FAKE_LLM_READY"


class FakeLLMProcess:
    """This module as a subprocess on a free loopback port; ``base_url`` ends in ``/v1``."""

    def __init__(self, token_delay: float = 0.0, log: str = "") -> None:
        command = [sys.executable, "-m", MODULE, "--port", "0"]
        command += ["--token-delay", str(token_delay), "--log", log]
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, cwd=REPO_ROOT, env=child_env()
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if not line.startswith(READY + " "):
            self.proc.kill()
            raise RuntimeError(f"fake LLM did not start: {line!r}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.base_url = self.url + "/v1"

    async def stats(self) -> dict[str, int]:
        """Requests per path so far, and chat requests per tool set (``tools=N:<hash>``)."""
        async with aiohttp.ClientSession() as session, session.get(self.url + "/_stats") as r:
            return dict(await r.json())

    def stop(self) -> None:
        terminate(self.proc, 10)


async def _serve(port: int, token_delay: float, log: str) -> None:
    async with FakeLLM.for_benchmarks(token_delay, port=port, log=log) as fake:
        print(f"{READY} {fake.port}", flush=True)
        await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token-delay", type=float, default=0.0)
    parser.add_argument("--log", default="", help="append one line per chat request to this file")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.port, args.token_delay, args.log))


if __name__ == "__main__":
    main()
