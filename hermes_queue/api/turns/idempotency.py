"""``Idempotency-Key`` on run-creating endpoints (upstream-api.md §2.2, §4.1), kept in Redis.

Upstream keeps these records in one process (memory or a local SQLite file), so a client whose
retry lands on another replica starts a second agent turn. Here the record lives in Redis under
the namespace, so a retry reaching any replica replays the run the first attempt started.

One record per (API key id, route, Idempotency-Key): ``{"fp": <fingerprint>, "run_id": ...}``. The
first request claims it with ``SET NX`` (a *pending* record with a short TTL, so a process that
dies between claim and creation does not block the key for a day), creates its run, then
settles the claim with the run id and the full TTL. A concurrent duplicate finds the pending
record and polls briefly until the run id appears, then replays it, so N simultaneous identical
requests create one run. The same key with another body is a 409; nothing is enqueued on a
replay or a conflict. Records live ``idempotency_ttl_seconds``, capped at ``retention_seconds``
so the run a record names always outlives it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from hermes_queue.api.errors import ApiError
from hermes_queue.keyguard import normalize_key
from hermes_queue.keys import Keys
from hermes_queue.runs.scripts import load_script
from hermes_queue.tenancy.keys import DEFAULT_TENANT

log = logging.getLogger(__name__)

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotency-Replayed"
# 1-255 visible ASCII characters (upstream 0.21's rule).
_VALID_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
# Headers that change what a request means, so they are part of its fingerprint.
SESSION_KEY_HEADER = "X-Hermes-Session-Key"
# A pending claim expires this fast if its process dies before recording its run.
PENDING_TTL_SECONDS = 30
# How long a concurrent duplicate waits for the first request to record its run.
WAIT_SECONDS = 10.0
POLL_SECONDS = 0.02


def read_key(headers: Mapping[str, str]) -> str | None:
    """The request's ``Idempotency-Key``, or None; 400 ``invalid_idempotency_key`` if malformed."""
    raw = headers.get(HEADER)
    if raw is None:
        return None
    if not _VALID_KEY.match(raw):
        raise ApiError(
            400,
            "invalid_idempotency_key",
            "Idempotency-Key must be 1-255 visible ASCII characters",
            param=HEADER,
        )
    return raw


def fingerprint(body: dict[str, Any], header_values: list[str | None]) -> str:
    """sha256 of the canonical JSON body plus the given headers: key order and whitespace in
    the client's JSON never make a retry look like a different request."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode())
    for value in header_values:
        digest.update(b"\x00" + (value or "").encode())
    return digest.hexdigest()


KEY_ID = "key"
"""The id of the default tenant's (the operator's) keys in record names. It says which tenant
a caller proved, and is not computed from a key, so reading Redis gives nothing to guess a key
against offline (a hash of it would). Every caller whose key is the tenant's is the same
principal, so a rotated key keeps its records."""


def _scope(headers: Mapping[str, str], api_key: str, tenant: str) -> str:
    """Whose records these are: the tenant's (``key`` for the default tenant, as before
    tenants; ``t.<tenant>`` for the others: two tenants sending the same Idempotency-Key never
    meet), or, on an API without a key (development, any bearer accepted), a hash of the bearer
    the caller chose, which then is no credential, so separate clients keep separate records."""
    if api_key:
        return KEY_ID if tenant == DEFAULT_TENANT else f"t.{tenant}"
    token = normalize_key(headers.get("Authorization", "").partition(" ")[2])
    return "open-" + hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()[:32]


class Idempotency:
    """One request's Idempotency-Key outcome.

    ``replay_of`` is the run to replay (nothing may be created), or None: then, if the request
    owns a claim, the ``async with`` block creates the run and calls :meth:`record`; leaving the
    block settles the claim (recorded run) or releases it (error, or nothing created), so a
    request refused by validation or backpressure never poisons the key.
    """

    def __init__(
        self,
        settle: AsyncScript | None = None,
        record_key: str = "",
        fp: str = "",
        ttl: int = 0,
        *,
        pending: str | None = None,
        replay_of: str | None = None,
    ) -> None:
        self.replay_of = replay_of
        self._settle = settle
        self._record_key = record_key
        self._fp = fp
        self._ttl = ttl
        self._pending = pending
        self._run_id: str | None = None

    @property
    def used(self) -> bool:
        """Whether the request carried an Idempotency-Key (so the answer says ``replayed``)."""
        return self._settle is not None

    def record(self, run_id: str) -> None:
        self._run_id = run_id

    async def __aenter__(self) -> Idempotency:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._settle is None or self._pending is None:
            return
        final = ""
        # A recorded run exists, even if the request failed after creating it (too few
        # replicas acknowledged it): keep it, so a retry replays it instead of starting another.
        if self._run_id is not None:
            final = json.dumps({"fp": self._fp, "run_id": self._run_id})
        try:
            await self._settle(keys=[self._record_key], args=[self._pending, final, self._ttl])
        except Exception:
            # The pending claim then expires by itself within PENDING_TTL_SECONDS.
            log.warning("could not settle idempotency record %s", self._record_key, exc_info=True)
        finally:
            self._pending = None


class IdempotencyRecords:
    """The process's access to Idempotency-Key records (its settle script registered once)."""

    def __init__(
        self, redis: aioredis.Redis, keys: Keys, *, api_key: str, ttl_seconds: int, retention: int
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._settle = redis.register_script(load_script("idempotency_settle"))
        # Capped at the runs' retention, so a replay always finds the run a record names.
        self._ttl = max(1, min(ttl_seconds, retention))
        self._api_key = api_key

    async def begin(
        self,
        request_headers: Mapping[str, str],
        route: str,
        body: dict[str, Any],
        *,
        tenant: str,
        headers: tuple[str, ...] = (),
    ) -> Idempotency:
        """Claim the request's Idempotency-Key for ``route``, or find the run to replay.

        ``tenant``: the caller's (its records are its own). ``headers``: request headers
        besides ``X-Hermes-Session-Key`` that change the request's meaning and so belong to its
        fingerprint. Raises 409 ``idempotency_key_conflict`` when
        the key was used with a different request, and 409 ``idempotency_key_in_progress`` when
        the first request did not record its run within :data:`WAIT_SECONDS`.
        """
        key = read_key(request_headers)
        if key is None:
            return Idempotency()
        names = (SESSION_KEY_HEADER, *headers)
        fp = fingerprint(body, [request_headers.get(name) for name in names])
        record_key = self._keys.idempotency(
            _scope(request_headers, self._api_key, tenant),
            route,
            hashlib.sha256(key.encode()).hexdigest(),
        )
        pending = json.dumps({"fp": fp, "run_id": None, "claim": uuid.uuid4().hex})
        deadline = time.monotonic() + WAIT_SECONDS
        redis, settle, ttl = self._redis, self._settle, self._ttl
        while True:
            if await redis.set(record_key, pending, nx=True, ex=PENDING_TTL_SECONDS):
                return Idempotency(settle, record_key, fp, ttl, pending=pending)
            raw = await redis.get(record_key)
            if raw is None:
                continue  # released or expired since the SET: claim it again
            stored = json.loads(raw)
            if stored.get("fp") != fp:
                raise ApiError(
                    409,
                    "idempotency_key_conflict",
                    "This Idempotency-Key was already used with a different request",
                    param=HEADER,
                )
            if stored.get("run_id"):
                return Idempotency(settle, record_key, fp, ttl, replay_of=str(stored["run_id"]))
            if time.monotonic() > deadline:
                raise ApiError(
                    409,
                    "idempotency_key_in_progress",
                    "A request with this Idempotency-Key is still being processed; retry shortly",
                    param=HEADER,
                    headers={"Retry-After": "1"},
                )
            await asyncio.sleep(POLL_SECONDS)


def replay_gone(run_id: str) -> ApiError:
    """The run a record names is gone (deleted by hand: records expire before their runs)."""
    return ApiError(
        409,
        "idempotency_key_expired",
        f"The run this Idempotency-Key started ({run_id}) no longer exists; use a new key",
        param=HEADER,
    )
