"""HAProxy (Debian's ``haproxy``) over API replicas on loopback, health-checking ``GET
/health/ready``, with its admin socket: a server set to ``drain`` or ``ready`` as an
orchestrator's endpoint removal would, and its state as HAProxy sees it (``bench/rollout.py``).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

from hermes_queue.redisio.embedded import free_port


class Balancer:
    """HAProxy over the API replicas, with its admin socket."""

    def __init__(self, ports: list[int], workdir: Path) -> None:
        self.port = free_port()
        self.socket = workdir / "haproxy.sock"
        servers = "\n".join(
            f"    server api{i} 127.0.0.1:{port} check inter 500ms fall 2 rise 2"
            for i, port in enumerate(ports)
        )
        self.config = workdir / "haproxy.cfg"
        self.config.write_text(
            f"""global
    stats socket {self.socket} mode 600 level admin
    maxconn 2000
defaults
    mode http
    timeout connect 2s
    timeout client 600s
    timeout server 600s
    timeout http-keep-alive 10s
    option http-server-close
frontend hermes
    bind 127.0.0.1:{self.port}
    default_backend api
backend api
    balance roundrobin
    option httpchk GET /health/ready
    http-check expect status 200
{servers}
"""
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
        self.process = subprocess.Popen([binary, "-f", str(self.config), "-db"])

    def admin(self, command: str) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(self.socket))
            conn.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def status(self, server: str) -> str:
        for line in self.admin("show stat").splitlines():
            fields = line.split(",")
            if len(fields) > 17 and fields[0] == "api" and fields[1] == server:
                return fields[17]
        return "?"

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
