"""Webhook deliveries in Redis, per shard beside the runs they are about (keys.py, "webhook
deliveries"): the outbox senders take work from, each delivery's hash, and the recent, pending
and dead-letter sets the operator's views read.

Every change is one script (``runs/lua/webhook_*.lua``), so a delivery's hash and the sets
that list it change together:

- ``claim``: take what is due, pushing it ``claim_seconds`` ahead (a sender killed
  mid-attempt leaves it due again for another sender then); a delivery's claim count is its
  attempt number and fences its settle;
- ``expand``: a run event becomes its deliveries (``messages.py``), atomically;
- ``settle``: an attempt's end: delivered, retried later, or a dead letter (dead, gone);
- ``redeliver``: an operator's "send it again, now".
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from yarl import URL

from hermes_queue.keys import Keys
from hermes_queue.runs.scripts import ScriptKeys, decode, load_script
from hermes_queue.webhooks.messages import NewDelivery, run_delivery_id, run_id_of

# Deliveries listed per shard (the newest); older ones stay until their hash expires.
RECENT_KEPT = 1_000
# A pending delivery's hash outlives any schedule (the longest is hours) by this much.
PENDING_TTL_SECONDS = 30 * 86_400

SCRIPTS = ("webhook_claim", "webhook_expand", "webhook_settle", "webhook_redeliver")
STATES = ("pending", "delivered", "dead", "gone")


@dataclass(frozen=True)
class Claimed:
    """What a claim took: a delivery (``claim`` > 0, its hash's ``fields``) or a run event."""

    member: str
    claim: int
    fields: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Attempt:
    """One attempt as recorded (``attempt:<n>`` of the delivery's hash)."""

    number: int
    at: float
    outcome: str
    status: int | None = None
    error: str | None = None
    ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.number,
            "at": self.at,
            "outcome": self.outcome,
            "status": self.status,
            "error": self.error,
            "duration_ms": self.ms,
        }


def _origin(url: str) -> str | None:
    """A URL shown without its path and query (which may carry a token)."""
    try:
        parsed = URL(url)
    except ValueError:
        return None
    return str(parsed.origin()) if parsed.host else None


@dataclass(frozen=True)
class Delivery:
    """A delivery as the operator's views show it."""

    id: str
    run_id: str
    event: str
    target: str
    state: str
    created_at: float
    attempts: list[Attempt]
    next_attempt_at: float | None
    ended_at: float | None
    url_origin: str | None

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> Delivery:
        claims = int(fields.get("claims") or 0)
        attempts = []
        for n in range(1, claims + 1):
            raw = fields.get(f"attempt:{n}")
            data = json.loads(raw) if raw else {}
            attempts.append(
                Attempt(
                    n,
                    float(data.get("at") or 0),
                    # A claim without a result: its sender was lost mid-attempt.
                    str(data.get("outcome") or "lost"),
                    data.get("status"),
                    data.get("error"),
                    data.get("ms"),
                )
            )
        next_ms = fields.get("next_ms")
        ended_ms = fields.get("ended_ms")
        return cls(
            id=fields.get("id", ""),
            run_id=fields.get("run_id", ""),
            event=fields.get("event", ""),
            target=fields.get("target", ""),
            state=fields.get("state", ""),
            created_at=int(fields.get("created_ms") or 0) / 1000,
            attempts=attempts,
            next_attempt_at=int(next_ms) / 1000 if next_ms else None,
            ended_at=int(ended_ms) / 1000 if ended_ms else None,
            url_origin=_origin(fields["url"]) if fields.get("url") else None,
        )

    def to_json(self) -> dict[str, Any]:
        last = self.attempts[-1] if self.attempts else None
        return {
            "object": "hermes.webhook.delivery",
            "id": self.id,
            "run_id": self.run_id,
            "event": self.event,
            "target": self.target,
            "url": self.url_origin,
            "state": self.state,
            "created_at": self.created_at,
            "attempt_count": len(self.attempts),
            "last_status": last.status if last else None,
            "last_error": last.error if last else None,
            "next_attempt_at": self.next_attempt_at,
            "ended_at": self.ended_at,
            "attempts": [a.to_json() for a in self.attempts],
        }


@dataclass(frozen=True)
class OutboxStats:
    """What metrics read, summed over shards."""

    pending: int
    oldest_pending_age_seconds: float
    dead_letters: int


def _text_map(flat: Iterable[Any]) -> dict[str, str]:
    items = [decode(x) for x in flat]
    return dict(zip(items[::2], items[1::2], strict=True))


class Outbox:
    def __init__(self, redis: aioredis.Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._keys_of = ScriptKeys(keys)
        self._scripts: dict[str, AsyncScript] = {
            name: redis.register_script(load_script(name, sharded=keys.cluster)) for name in SCRIPTS
        }

    def shard_of(self, delivery_id: str) -> int | None:
        run_id = run_id_of(delivery_id)
        return None if run_id is None else self.keys.shard_of(run_id)

    # -- the senders' side -------------------------------------------------------------------
    async def claim(self, shard: int, limit: int, claim_seconds: float) -> list[Claimed]:
        taken = await self._scripts["webhook_claim"](
            keys=self._keys_of.of_shard("webhook_claim", shard),
            args=[limit, int(claim_seconds * 1000), self.keys.webhook_delivery_prefix_at(shard)],
        )
        return [Claimed(decode(m), int(c), _text_map(f)) for m, c, f in taken]

    async def expand(self, shard: int, event_member: str, made: list[NewDelivery]) -> bool:
        """Replace the run event with its deliveries; False when it was no longer queued."""
        args: list[Any] = [
            event_member,
            self.keys.webhook_delivery_prefix_at(shard),
            RECENT_KEPT,
            PENDING_TTL_SECONDS,
        ]
        for delivery in made:
            fields = delivery.fields()
            args += [delivery.id, len(fields)]
            for pair in fields.items():
                args += pair
        done = await self._scripts["webhook_expand"](
            keys=self._keys_of.of_shard("webhook_expand", shard), args=args
        )
        return bool(done)

    async def drop(self, shard: int, member: str) -> None:
        """Remove a member that can never be delivered (its run record is gone)."""
        await cast("Awaitable[int]", self.redis.zrem(self.keys.webhook_outbox_at(shard), member))

    async def settle(
        self,
        shard: int,
        delivery_id: str,
        claim: int,
        outcome: str,
        *,
        delay_seconds: float = 0.0,
        keep_seconds: int,
        dead_seconds: int,
        fields: dict[str, str],
    ) -> bool:
        """The end of attempt ``claim``: ``retry`` (after ``delay_seconds``), ``delivered``,
        ``dead`` or ``gone``. False: fenced out (another sender took it since)."""
        done = await self._scripts["webhook_settle"](
            keys=self._keys_of.of_delivery("webhook_settle", shard, delivery_id),
            args=[
                delivery_id,
                claim,
                outcome,
                int(delay_seconds * 1000),
                keep_seconds,
                dead_seconds,
                *[item for pair in fields.items() for item in pair],
            ],
        )
        return bool(done)

    # -- the operator's side -----------------------------------------------------------------
    async def redeliver(self, delivery_id: str) -> bool:
        shard = self.shard_of(delivery_id)
        if shard is None:
            return False
        done = await self._scripts["webhook_redeliver"](
            keys=self._keys_of.of_delivery("webhook_redeliver", shard, delivery_id),
            args=[delivery_id, PENDING_TTL_SECONDS],
        )
        return bool(done)

    async def get(self, delivery_id: str) -> Delivery | None:
        shard = self.shard_of(delivery_id)
        if shard is None:
            return None
        key = self.keys.webhook_delivery_at(shard, delivery_id)
        raw = await cast("Awaitable[dict[bytes, bytes]]", self.redis.hgetall(key))
        return Delivery.from_fields(_text_map(x for kv in raw.items() for x in kv)) if raw else None

    async def run_delivery(self, run_id: str) -> Delivery | None:
        """The delivery of a run's end to its own webhook, once a sender made it."""
        return await self.get(run_delivery_id(run_id))

    async def recent(self, limit: int, state: str | None = None) -> list[Delivery]:
        """The newest deliveries of every shard (``state`` "dead": the dead letters, newest
        first), at most ``limit``."""
        listed: list[tuple[float, int, str]] = []
        for shard in self.keys.shard_ids:
            key = (
                self.keys.webhook_dead_at(shard)
                if state == "dead"
                else self.keys.webhook_recent_at(shard)
            )
            found = await self.redis.zrevrange(key, 0, limit - 1, withscores=True)
            listed += [(score, shard, decode(member)) for member, score in found]
        listed.sort(reverse=True)
        out: list[Delivery] = []
        for _score, shard, delivery_id in listed:
            key = self.keys.webhook_delivery_at(shard, delivery_id)
            raw = await cast("Awaitable[dict[bytes, bytes]]", self.redis.hgetall(key))
            if not raw:
                continue  # expired
            delivery = Delivery.from_fields(_text_map(x for kv in raw.items() for x in kv))
            if state in (None, "dead") or delivery.state == state:
                out.append(delivery)
            if len(out) >= limit:
                break
        return out

    async def stats(self) -> OutboxStats:
        """Pending count, the oldest pending one's age and the dead letters, over shards (two
        commands a shard, one round trip)."""
        pending = dead = 0
        oldest_ms: float | None = None
        now = await self.redis.time()
        now_ms = now[0] * 1000 + now[1] // 1000
        for shard in self.keys.shard_ids:
            pipe = self.redis.pipeline(transaction=False)
            pipe.zcard(self.keys.webhook_pending_at(shard))
            pipe.zrange(self.keys.webhook_pending_at(shard), 0, 0, withscores=True)
            pipe.zcard(self.keys.webhook_dead_at(shard))
            count, head, dead_count = await pipe.execute()
            pending += int(count)
            dead += int(dead_count)
            if head:
                score = float(head[0][1])
                oldest_ms = score if oldest_ms is None else min(oldest_ms, score)
        age = 0.0 if oldest_ms is None else max(0.0, (now_ms - oldest_ms) / 1000)
        return OutboxStats(pending, age, dead)
