"""Keep Hermes' TLS setup warm in a long-lived worker.

Profiling a turn of Hermes' ``AIAgent`` shows most of its CPU in ``load_verify_locations``:
building an agent validates the CA bundle four times (``agent.ssl_guard``) and every provider
client, one per LLM request included, gets a new ``SSLContext`` parsed from the bundle
(``agent.ssl_verify.resolve_httpx_verify``), about 45 ms each on a small machine. A worker
process can do both once:

- the bundle is validated once when the backend starts (a broken bundle still fails loudly),
  then Hermes' own switch ``HERMES_SKIP_SSL_GUARD`` skips the per-agent re-validation;
- ``resolve_httpx_verify`` is memoised, so clients share one verifying context per trust
  configuration. Hermes passes that context to httpx as ``verify=``; httpx uses it as it is
  (no client certificate is loaded into it), so sharing it is as safe as sharing one client.
  Where Hermes would answer ``True`` (httpx's default trust), the memo answers the equivalent
  context built from certifi, which is what httpx would otherwise parse anew per client. The
  ``SSL_CERT_DIR`` case, which httpx handles itself, is left to httpx.

Both are process-wide, as the costs are; ``install`` is idempotent.
"""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Callable
from typing import Any

_CA_ENV_VARS = ("HERMES_CA_BUNDLE", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
_lock = threading.Lock()
_installed = False


def install() -> None:
    """Validate the CA bundle once, then stop Hermes from repeating TLS work per agent."""
    global _installed
    with _lock:
        if _installed:
            return
        from agent import ssl_guard, ssl_verify

        ssl_guard.verify_ca_bundle()  # raises SSLConfigurationError on a broken bundle
        os.environ["HERMES_SKIP_SSL_GUARD"] = "1"
        ssl_verify.resolve_httpx_verify = _memoised(ssl_verify.resolve_httpx_verify)
        _installed = True


def _memoised(resolve: Callable[..., bool | ssl.SSLContext]) -> Callable[..., Any]:
    contexts: dict[tuple[Any, ...], bool | ssl.SSLContext] = {}

    def resolve_httpx_verify(
        *, ca_bundle: str | None = None, ssl_verify: Any = None, base_url: str = ""
    ) -> bool | ssl.SSLContext:
        # The environment is part of the key: Hermes reads these variables on every call.
        key = (
            ca_bundle,
            repr(ssl_verify),
            *(os.environ.get(name, "") for name in (*_CA_ENV_VARS, "SSL_CERT_DIR")),
        )
        with _lock:
            cached = contexts.get(key)
        if cached is not None:
            return cached
        verify = resolve(ca_bundle=ca_bundle, ssl_verify=ssl_verify, base_url=base_url)
        if verify is True and not os.environ.get("SSL_CERT_DIR"):
            import certifi

            verify = ssl.create_default_context(cafile=certifi.where())
        if verify is False:
            return verify  # insecure mode: let Hermes warn about it every time, as it does
        with _lock:
            return contexts.setdefault(key, verify)

    return resolve_httpx_verify
