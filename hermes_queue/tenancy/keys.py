"""Tenants: who a bearer key belongs to, and the one table that answers it per request.

A deployment has one operator key (``HERMES_QUEUE_API_KEY``, tenant :data:`DEFAULT_TENANT`)
and, optionally, tenant keys (``HERMES_QUEUE_API_KEYS``: comma-separated ``tenant=key`` pairs;
``HERMES_QUEUE_API_KEYS_FILE``: the same, one pair a line, for a secrets mount). A tenant may
have several keys (rotation: add the new one, move clients, remove the old one); keys of the
tenant ``default`` are operator keys too. Whatever a tenant creates is its own
(docs/tenants.md); the operator's key alone reaches the operator surfaces.

Keys are kept as SHA-256 digests only (:class:`KeyTable`): a request's bearer is hashed once,
its first bytes pick the candidates from a dict and the full digest is compared with
``hmac.compare_digest``. A key may also be configured as its digest
(``tenant=sha256:<64 hex>``), so a key never has to be written in clear where it is configured.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hermes_queue.keyguard import normalize_key

DEFAULT_TENANT = "default"
"""The operator's tenant, and the one tenant of a deployment with a single key."""
TENANT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
TENANT_NAME_RULE = "1-32 characters of a-z, 0-9, '_' and '-', starting with a letter or digit"
DIGEST_PREFIX = "sha256:"
_HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")
# Candidates are found by the digest's first bytes; the whole digest is then compared.
_INDEX_BYTES = 8


class TenantKeyError(ValueError):
    """A tenant key entry that cannot be used; the message names where it is, never the key."""


def key_digest(key: str) -> bytes:
    """The SHA-256 of a key as configured or as sent (normalised as the operator key is);
    header bytes that are not UTF-8 arrive surrogate-escaped and are hashed as the raw bytes."""
    return hashlib.sha256(normalize_key(key).encode("utf-8", "surrogateescape")).digest()


def tenant_problem(name: str) -> str | None:
    """Why ``name`` cannot name a tenant, or None."""
    if TENANT_NAME.match(name) is None:
        return f"tenant name {name[:40]!r} is not {TENANT_NAME_RULE}"
    return None


@dataclass(frozen=True)
class TenantKey:
    """One configured key of a tenant: its digest, and its clear text when it was given in
    clear (for the bind-time strength check; never kept in the :class:`KeyTable`)."""

    tenant: str
    digest: bytes
    clear: str | None = None

    def __repr__(self) -> str:
        return f"TenantKey(tenant={self.tenant!r}, digest={self.digest.hex()[:8]}…)"


def _entries(text: str, where: str, *, lines: bool) -> Iterator[tuple[str, str]]:
    """(place, item) for each non-empty item: file lines (``#`` comments), else commas."""
    if lines:
        for number, line in enumerate(text.splitlines(), 1):
            item = line.strip()
            if item and not item.startswith("#"):
                yield f"{where} line {number}", item
        return
    for number, item in enumerate(text.split(","), 1):
        if item.strip():
            yield f"{where} entry {number}", item.strip()


def parse_keys(text: str, where: str, *, lines: bool = False) -> list[TenantKey]:
    """The ``tenant=key`` pairs of ``text`` (a comma-separated setting, or a file's lines).
    Raises :class:`TenantKeyError` naming the entry (``where``) and the problem."""
    parsed: list[TenantKey] = []
    for place, item in _entries(text, where, lines=lines):
        tenant, separator, key = item.partition("=")
        tenant, key = tenant.strip(), normalize_key(key)
        if not separator or not key:
            raise TenantKeyError(f"{place} is not tenant=key")
        problem = tenant_problem(tenant)
        if problem is not None:
            raise TenantKeyError(f"{place}: {problem}")
        if key.startswith(DIGEST_PREFIX):
            hex_digest = key[len(DIGEST_PREFIX) :].lower()
            if _HEX_DIGEST.match(hex_digest) is None:
                raise TenantKeyError(f"{place}: a sha256: key must be 64 hex digits")
            parsed.append(TenantKey(tenant, bytes.fromhex(hex_digest)))
        elif any(c.isspace() or not c.isprintable() for c in key):
            raise TenantKeyError(f"{place}: the key contains whitespace or control characters")
        else:
            parsed.append(TenantKey(tenant, key_digest(key), key))
    return parsed


def configured_keys(operator_key: str, pairs: str, pairs_file: str) -> list[TenantKey]:
    """Every key of the deployment: the operator's (tenant ``default``) first, then the pairs
    of the setting and of the file. Raises :class:`TenantKeyError`: an unreadable file, a bad
    entry, tenant keys without an operator key, one key given to two tenants."""
    keys = [TenantKey(DEFAULT_TENANT, key_digest(operator_key), operator_key)]
    if not operator_key:
        keys = []
    keys += parse_keys(pairs, "api_keys (HERMES_QUEUE_API_KEYS)")
    if pairs_file:
        try:
            text = Path(pairs_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TenantKeyError(
                f"cannot read api_keys_file (HERMES_QUEUE_API_KEYS_FILE) {pairs_file}: {exc}"
            ) from None
        keys += parse_keys(text, f"api_keys_file {pairs_file}", lines=True)
    if keys and not operator_key:
        raise TenantKeyError(
            "tenant keys (HERMES_QUEUE_API_KEYS) need the operator's key (HERMES_QUEUE_API_KEY) "
            "too: without it the API would be open to anyone"
        )
    owners: dict[bytes, str] = {}
    for key in keys:
        if owners.setdefault(key.digest, key.tenant) != key.tenant:
            raise TenantKeyError(
                f"one key is given to two tenants ({owners[key.digest]!r} and {key.tenant!r})"
            )
    return keys


class KeyTable:
    """The deployment's keys as digests, by tenant: ``tenant_of`` is one hash and a dict
    lookup per request. Empty: no key is configured (the API is open, everyone ``default``)."""

    def __init__(self, keys: Iterable[TenantKey] = ()) -> None:
        self._index: dict[bytes, list[tuple[bytes, str]]] = {}
        self._tenants: set[str] = {DEFAULT_TENANT}
        for key in keys:
            candidates = self._index.setdefault(key.digest[:_INDEX_BYTES], [])
            if (key.digest, key.tenant) not in candidates:
                candidates.append((key.digest, key.tenant))
            self._tenants.add(key.tenant)

    @property
    def open(self) -> bool:
        """No key configured: every request is the operator's."""
        return not self._index

    @property
    def tenants(self) -> frozenset[str]:
        """Every configured tenant (``default`` always)."""
        return frozenset(self._tenants)

    def tenant_of(self, token: str) -> str | None:
        """The tenant whose key ``token`` is, or None."""
        digest = key_digest(token)
        for candidate, tenant in self._index.get(digest[:_INDEX_BYTES], ()):
            if hmac.compare_digest(candidate, digest):
                return tenant
        return None


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as: its tenant (the key's, or the one its ``/p/<tenant>/`` prefix
    selected) and whether its key is the operator's."""

    tenant: str = DEFAULT_TENANT
    operator: bool = True


OPERATOR = Principal()
