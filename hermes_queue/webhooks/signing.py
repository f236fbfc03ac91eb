"""Standard Webhooks signatures (https://www.standardwebhooks.com): ``webhook-id``,
``webhook-timestamp`` and ``webhook-signature``, one ``v1,<base64 HMAC-SHA256 of
"id.timestamp.body">`` per secret, space-separated, so a receiver that knows either the old or
the new secret verifies during a rotation.

Signed with the ``standardwebhooks`` package's own ``Webhook.sign`` (the reference
implementation receivers verify with), not by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from standardwebhooks import Webhook

CONTENT_TYPE = "application/json"
USER_AGENT = "hermes-queue-webhooks"


class Signer:
    """Signs with every configured secret (``webhook_secret``); none: unsigned (the headers
    but the signature), which the worker warns about at start."""

    def __init__(self, secrets: Sequence[str]) -> None:
        self._hooks = [Webhook(secret) for secret in secrets]

    @property
    def signs(self) -> bool:
        return bool(self._hooks)

    def headers(self, msg_id: str, timestamp: int, body: str) -> dict[str, str]:
        """The headers of one attempt at ``msg_id``, made at ``timestamp`` (unix seconds: each
        attempt its own, as receivers refuse timestamps older than a few minutes)."""
        at = datetime.fromtimestamp(timestamp, tz=UTC)
        headers = {
            "content-type": CONTENT_TYPE,
            "user-agent": USER_AGENT,
            "webhook-id": msg_id,
            "webhook-timestamp": str(timestamp),
        }
        if self._hooks:
            headers["webhook-signature"] = " ".join(
                hook.sign(msg_id, at, body) for hook in self._hooks
            )
        return headers
