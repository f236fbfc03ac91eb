"""The webhook sender every worker process runs beside its turns (``workers/worker.py``).

Each pass takes what is due in every shard's outbox (``outbox.Outbox.claim``, up to the
sender's free slots): a run event is turned into its deliveries at once (reading its run
record, ``messages.deliveries``); a delivery is attempted (``attempt.post``, through the
connect-time guard of ``guard.py``, signed by ``signing.Signer``) and settled by its result.
A pass that took nothing sleeps ``webhook_poll_seconds``, or until woken (``wake``: a run
this worker drove ended in that shard). On a Redis Cluster a pass reads the shards woken or
busy since the last one and, in turn, an eighth of the others (``_shards_due``), so an idle
sender's cost does not grow with the shards: a delivery queued by a run that ended elsewhere
(a reaper, a stop through the API) or due for a retry waits at most ``SWEEP_PASSES`` passes.

At least once: a delivery leaves the outbox only when settled; a sender that dies, freezes or
stops mid-attempt leaves it claimed, and ``claim_seconds`` later any sender takes it again
under the same ``webhook-id``. A settle from a sender whose claim was taken over is refused
(its attempt number is stale), so the record follows the newest attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol, cast

import aiohttp
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from hermes_queue.aio import cancel_and_wait, cancel_requested
from hermes_queue.config import WebhookSettings
from hermes_queue.keys import Keys
from hermes_queue.logs import register_secret
from hermes_queue.webhooks import attempt
from hermes_queue.webhooks.guard import AllowList, GuardedConnector
from hermes_queue.webhooks.messages import SUBSCRIPTION_PREFIX, RunEvent, deliveries
from hermes_queue.webhooks.outbox import Claimed, Outbox
from hermes_queue.webhooks.signing import Signer

log = logging.getLogger(__name__)

# On a Redis Cluster an idle pass reads 1/SWEEP_PASSES of the shards in turn (_shards_due).
SWEEP_PASSES = 8


class DeliveryObserver(Protocol):
    """Where a sender reports (``metrics.WorkerMetrics``)."""

    def webhook_attempt(self, kind: str) -> None: ...

    def webhook_settled(self, outcome: str) -> None: ...


class AttemptSpan(Protocol):
    def result(self, kind: str, status: int | None) -> None: ...


class DeliveryTrace(Protocol):
    """A traced process's span per attempt (``tracing.spans.Tracing``), a child of the run's
    trace (``carrier``, the run's W3C context) when it has one."""

    def webhook_span(
        self, carrier: Mapping[str, str] | None, attributes: Mapping[str, Any]
    ) -> AbstractContextManager[AttemptSpan]: ...


class WebhookSender:
    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        settings: WebhookSettings,
        *,
        retention_seconds: int,
        observer: DeliveryObserver | None = None,
        trace: DeliveryTrace | None = None,
        resolver: Any = None,
    ) -> None:
        """``resolver``: an aiohttp resolver for the guarded connector (tests stub one)."""
        self.redis = redis
        self.keys = keys
        self.settings = settings
        self.outbox = Outbox(redis, keys)
        self.signer = Signer(settings.secret)
        self._retention = retention_seconds
        self._observer = observer
        self._trace = trace
        self._resolver = resolver
        self._delays = settings.retry_delays
        self._tasks: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None
        # The shards the next pass reads besides its sweep (_shards_due); None: every one.
        self._due: set[int] | None = None
        self._sweep_next = 0
        self._woken = asyncio.Event()
        for subscription in settings.subscriptions.values():
            register_secret(subscription.url)  # its path may be its secret: never logged

    async def run_forever(self) -> None:
        if not self.signer.signs:
            log.warning("webhook_secret is not set: webhook deliveries go out unsigned")
        connector = GuardedConnector(
            AllowList(self.settings.allowed_hosts),
            resolver=self._resolver,
            limit=self.settings.concurrency,
        )
        self._session = aiohttp.ClientSession(connector=connector, trust_env=False)
        try:
            while not cancel_requested():
                try:
                    busy = await self.pass_once()
                except RedisError as exc:
                    log.warning("webhook sender: Redis unavailable (%s)", exc)
                    busy = False
                except Exception:
                    log.exception("webhook sender pass failed")
                    busy = False
                if not busy:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.settings.poll_seconds):
                            await self._woken.wait()
                self._woken.clear()
        finally:
            await cancel_and_wait(*self._tasks)
            await self._session.close()

    async def pass_once(self) -> bool:
        """Take and start what is due; True when more may be due at once (an event was
        expanded, or the sender was full), so the loop goes on without sleeping."""
        again = False
        shards = self._shards_due()
        for index, shard in enumerate(shards):
            free = self.settings.concurrency - len(self._tasks)
            if free <= 0:
                self._due_next(shards[index:])  # not read: read first when a slot frees
                break
            taken = await self.outbox.claim(shard, free, self.settings.claim_seconds)
            if taken:
                self._due_next([shard])  # busy: read it again next pass
            for item in taken:
                if item.claim == 0:
                    await self._expand(shard, item.member)
                    again = True
                else:
                    self._start(shard, item)
        if len(self._tasks) >= self.settings.concurrency:
            await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
            again = True
        return again

    def wake(self, shard: int) -> None:
        """Read ``shard``'s outbox at once (a run of this process ended there: its terminal
        event may want deliveries)."""
        self._due_next([shard])
        self._woken.set()

    def _due_next(self, shards: list[int]) -> None:
        if self._due is not None:
            self._due.update(shards)

    def _shards_due(self) -> list[int]:
        """What a pass reads: the one shard without a cluster; on a cluster every shard on the
        first pass, then the shards woken or busy since the last one and the next
        :data:`SWEEP_PASSES`-th of the shards in turn (each shard every ``SWEEP_PASSES``
        passes at least)."""
        count = len(self.keys.shard_ids)
        due, self._due = self._due, set()
        if count == 1 or due is None:
            return list(self.keys.shard_ids)
        for _ in range(-(-count // SWEEP_PASSES)):
            due.add(self._sweep_next)
            self._sweep_next = (self._sweep_next + 1) % count
        return sorted(due)

    def _start(self, shard: int, item: Claimed) -> None:
        task = asyncio.create_task(self._deliver(shard, item), name=f"webhook {item.member}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _expand(self, shard: int, member: str) -> None:
        event = RunEvent.parse(member)
        raw = None
        if event is not None:
            record_key = self.keys.run(event.run_id)
            raw = await cast("Awaitable[dict[bytes, bytes]]", self.redis.hgetall(record_key))
        if event is None or not raw:
            log.error("webhook event %s: its run record is gone; nothing to deliver", member)
            await self.outbox.drop(shard, member)
            return
        await self.outbox.expand(shard, member, deliveries(event, raw, self.settings.subscriptions))

    def _url(self, fields: dict[str, str]) -> str | None:
        target = fields.get("target", "")
        if target.startswith(SUBSCRIPTION_PREFIX):
            subscription = self.settings.subscriptions.get(target[len(SUBSCRIPTION_PREFIX) :])
            return subscription.url if subscription is not None else None
        return fields.get("url") or None

    async def _deliver(self, shard: int, item: Claimed) -> None:
        try:
            with self._span(item) as span:
                result = await self._attempt(item)
                if span is not None:
                    span.result(result.kind, result.status)
            await self._settle(shard, item, result)
        except RedisError as exc:  # the claim lapses and another attempt follows
            log.warning("webhook %s: not settled (%s)", item.member, exc)
        except Exception:
            log.exception("webhook %s: attempt failed", item.member)

    async def _attempt(self, item: Claimed) -> attempt.Result:
        fields = item.fields
        url = self._url(fields)
        if url is None:
            return attempt.Result("refused", error=f"{fields.get('target')} is not configured")
        body = fields.get("body", "")
        headers = self.signer.headers(item.member, int(time.time()), body)
        assert self._session is not None
        return await attempt.post(self._session, url, headers, body, self.settings.timeout_seconds)

    async def _settle(self, shard: int, item: Claimed, result: attempt.Result) -> None:
        tries = int(item.fields.get("tries") or 0)
        verdict = attempt.decide(result, tries, self._delays)
        record = {
            "at": round(time.time(), 3),
            "outcome": result.kind,
            "status": result.status,
            "error": result.error,
            "ms": result.ms,
        }
        settled = await self.outbox.settle(
            shard,
            item.member,
            item.claim,
            verdict.outcome,
            delay_seconds=verdict.delay,
            keep_seconds=self._retention,
            dead_seconds=self.settings.dead_letter_seconds,
            fields={"tries": str(tries + 1), f"attempt:{item.claim}": json.dumps(record)},
        )
        self._observe(result.kind, verdict.outcome if settled else "")
        if verdict.outcome in ("dead", "gone") and settled:
            log.warning(
                "webhook %s (%s, run %s): %s after %d attempt(s): %s",
                item.member,
                item.fields.get("target"),
                item.fields.get("run_id"),
                verdict.outcome,
                item.claim,
                result.error or result.status,
            )

    def _observe(self, kind: str, outcome: str) -> None:
        observer = self._observer
        if observer is None:
            return
        observer.webhook_attempt(kind)
        if outcome and outcome != "retry":
            observer.webhook_settled(outcome)

    def _span(self, item: Claimed) -> AbstractContextManager[AttemptSpan | None]:
        if self._trace is None:
            return nullcontext()
        fields = item.fields
        carrier = json.loads(fields["trace"]) if fields.get("trace") else None
        return self._trace.webhook_span(
            carrier,
            {
                "delivery_id": item.member,
                "run_id": fields.get("run_id", ""),
                "event": fields.get("event", ""),
                "target": fields.get("target", ""),
                "attempt": item.claim,
            },
        )
