"""A Redis connection that loses one reply: the command reaches Redis and runs, its reply is
read off the socket, then the connection is dropped and the caller is told
``Connection closed by server.``, as a client Redis 7.0 paused for a ``CLUSTER FAILOVER`` is
told once the switch is over. What a resend must survive: a first send that was applied.

Arm it with a marker (bytes the packed command contains: a script's sha, a key), and swap it
in for ``redisio.switchover.SwitchoverConnection`` where the client under test is built
(``redisio.connect`` for a plain or Sentinel URL, ``redisio.cluster_retry`` for a cluster).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, ClassVar

from redis.exceptions import ConnectionError as RedisConnectionError

from hermes_queue.redisio.switchover import SwitchoverConnection
from hermes_queue.runs.scripts import load_script


def script_sha(name: str, *, sharded: bool = False) -> bytes:
    """The sha a run script (``runs/lua/<name>.lua``) is called by, as the repository loads it."""
    return hashlib.sha1(load_script(name, sharded=sharded).encode()).hexdigest().encode()


def _packed(command: Any) -> bytes:
    if isinstance(command, bytes | bytearray | memoryview):
        return bytes(command)
    if isinstance(command, str):
        return command.encode()
    chunks: Iterable[Any] = command
    return b"".join(_packed(chunk) for chunk in chunks)


class LosesReply(SwitchoverConnection):
    """Loses the reply to the next command containing :attr:`armed` (then disarms)."""

    armed: ClassVar[bytes | None] = None
    lost: ClassVar[int] = 0  # replies lost so far
    _losing = False

    @classmethod
    def arm(cls, marker: bytes) -> None:
        cls.armed, cls.lost = marker, 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        await super().send_packed_command(command, check_health)
        marker = LosesReply.armed
        if marker is not None and marker in _packed(command):
            LosesReply.armed = None
            self._losing = True

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        response = await super().read_response(*args, **kwargs)
        if self._losing:  # read, so Redis ran it; the caller never sees it
            self._losing = False
            LosesReply.lost += 1
            await self.disconnect()
            raise RedisConnectionError("Connection closed by server.")
        return response
