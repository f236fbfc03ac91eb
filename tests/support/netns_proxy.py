"""A TCP proxy whose listening socket is on a simulated host (a network namespace) and whose
outgoing connections leave from the namespace it was started in: how the several-hosts test
puts the suite's PostgreSQL on a host of its own.

    python -m tests.support.netns_proxy <netns> <listen-host>:<port> <target-host>:<port>

Prints ``ready`` once it listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys

from tests.support.netns import _setns


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def serve(listener: socket.socket, host: str, port: int) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(host, port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))

    server = await asyncio.start_server(handle, sock=listener)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    netns, listen, target = sys.argv[1:4]
    listen_host, listen_port = listen.rsplit(":", 1)
    target_host, target_port = target.rsplit(":", 1)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    inside = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    _setns(inside)
    listener = socket.create_server((listen_host, int(listen_port)))
    _setns(home)  # connections to the target leave from where we started
    asyncio.run(serve(listener, target_host, int(target_port)))


if __name__ == "__main__":
    main()
