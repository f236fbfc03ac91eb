"""What a Redis Cluster node's error reply says about where a key's slot is: ``MOVED`` (it has
another owner), ``ASK`` (it is being migrated, this key already gone), ``TRYAGAIN`` (the call's
keys are split by a migration), ``CLUSTERDOWN`` (the slot is not served just now). On each,
nothing ran. redis-py hands them over in two forms: a cluster connection's parser makes each a
class of its own and strips the word (and its ``MovedError`` is an ``AskError``), a plain
connection's leaves a bare ``ResponseError`` that starts with the word; every caller asks here,
so none reads one form and misses the other."""

from __future__ import annotations

from dataclasses import dataclass

from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    ResponseError,
    TryAgainError,
)

KINDS = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")
# Subclasses before their bases: MovedError is an AskError.
_CLASSES: tuple[tuple[type[ResponseError], str], ...] = (
    (MovedError, "MOVED"),
    (AskError, "ASK"),
    (TryAgainError, "TRYAGAIN"),
    (ClusterDownError, "CLUSTERDOWN"),
)


@dataclass(frozen=True)
class Redirection:
    """``kind`` (one of :data:`KINDS`) and the rest of the reply (``MOVED``/``ASK``:
    ``<slot> <host>:<port>``)."""

    kind: str
    rest: str

    @property
    def address(self) -> str:
        """The ``host:port`` a ``MOVED`` or ``ASK`` names."""
        return self.rest.split()[-1]


def redirection(error: ResponseError) -> Redirection | None:
    """The redirection ``error`` is, or None for any other error reply."""
    for cls, kind in _CLASSES:
        if isinstance(error, cls):
            return Redirection(kind, str(error))
    word, _, rest = str(error).partition(" ")
    return Redirection(word, rest) if word in KINDS else None


def moved(error: BaseException) -> bool:
    """Whether ``error`` is a ``MOVED`` reply: the slot has another owner, so the caller's slot
    table is out of date."""
    found = redirection(error) if isinstance(error, ResponseError) else None
    return found is not None and found.kind == "MOVED"
