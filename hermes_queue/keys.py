"""Every Redis key name hermes-queue uses. Nothing else formats a key.

All keys live under one namespace so deployments (and tests) can share a Redis without
colliding. The queue is one sorted set of run ids; no per-job key exists (``jobqueue/jobs.py``).

On one Redis (plain or Sentinel) there is one shard: a run's keys share the hash tag
``{run_id}``, and the queue, leases, blocked set and stats are single keys, as they always were
(a running deployment upgrades without losing in-flight runs).

On a Redis Cluster (``cluster=True``) there are ``shards`` virtual shards. Each has one hash tag,
chosen so that the shards' slots are spread evenly over the slot space (:func:`shard_tag`), so
any even split of slots between primaries gives each primary its share of shards. A run belongs
to the shard its id hashes to (:meth:`Keys.shard_of`), and its own keys (record, events, steps,
readers) carry that shard's tag, as do the shard's queue, leases, blocked set and stats: every
run script then touches one slot. A session belongs to the shard its id hashes to, and the ids
of its runs are drawn into that shard (``runs/placement.py``, the one home of that rule), so the
scripts that keep its one-turn-at-a-time rule stay single-slot too.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot


@functools.lru_cache(maxsize=1024)
def shard_tag(shard: int, shards: int) -> str:
    """The hash tag of ``shard`` of ``shards``: the first ``s<shard>.<n>`` whose slot falls in
    the shard's own 1/``shards`` of the slot space (deterministic, found in ~``shards`` tries)."""
    low = shard * REDIS_CLUSTER_HASH_SLOTS // shards
    high = (shard + 1) * REDIS_CLUSTER_HASH_SLOTS // shards
    n = 0
    while True:
        tag = f"s{shard}.{n}"
        if low <= key_slot(tag.encode()) < high:
            return tag
        n += 1


def _hash(text: str, shards: int) -> int:
    return zlib.crc32(text.encode()) % shards


@dataclass(frozen=True)
class Keys:
    namespace: str
    # Virtual shards on a Redis Cluster (``redis_cluster_shards``); one without a cluster.
    shards: int = 1
    cluster: bool = False

    # -- shards --------------------------------------------------------------------------------
    @property
    def shard_ids(self) -> range:
        """Every shard: what workers poll, reapers scan and operator surfaces sum over."""
        return range(self.shards if self.cluster else 1)

    def shard_of(self, run_id: str) -> int:
        """The shard a run belongs to (0 without a cluster)."""
        return _hash(run_id, self.shards) if self.cluster else 0

    def session_shard(self, session_id: str) -> int:
        """The shard a session's active and pending keys, and so its runs, belong to."""
        return _hash(session_id, self.shards) if self.cluster else 0

    def shard_slot(self, shard: int) -> int:
        """The cluster slot of every key of ``shard`` (the node serving it holds them all)."""
        return int(key_slot(self._base(shard).encode()))

    def _base(self, shard: int) -> str:
        """The namespace, followed on a cluster by the shard's hash tag."""
        if not self.cluster:
            return self.namespace
        return f"{self.namespace}:{{{shard_tag(shard, self.shards)}}}"

    def _run_base(self, run_id: str) -> str:
        if not self.cluster:
            return f"{self.namespace}:run:{{{run_id}}}"
        return f"{self._base(self.shard_of(run_id))}:run:{run_id}"

    # -- per run (one hash tag) --------------------------------------------------------------
    def run(self, run_id: str) -> str:
        """Hash: the run record (status, attempt, request, output...)."""
        return self._run_base(run_id)

    def events(self, run_id: str) -> str:
        """Stream: the run's canonical events, in order. Also the name of the pub/sub channel
        on which the scripts that append to it publish each entry (streams/hub.py); on a
        cluster a sharded channel (``SPUBLISH``), served by the node holding the stream."""
        return f"{self._run_base(run_id)}:events"

    def steps(self, run_id: str) -> str:
        """List (JSON): the run's recorded agent steps, in order (agents/steps.py): each model
        call with the message it produced, each tool call's start and result. Appended with
        the events before them in one fenced script (``append_step.lua``); a later attempt
        resumes after the last one. Never trimmed; kept as long as the run record."""
        return f"{self._run_base(run_id)}:steps"

    def readers(self, run_id: str) -> str:
        """Sorted set: the API processes whose clients read the run's events -> until when
        (ms, Redis clock; streams/presence.py). A run started by a request that reads it is
        abandoned once nobody does, and the next turn of its session supersedes it."""
        return f"{self._run_base(run_id)}:readers"

    # -- per session --------------------------------------------------------------------
    def _session_base(self, session_id: str) -> str:
        if not self.cluster:
            return f"{self.namespace}:session:{{{session_id}}}"
        return f"{self._base(self.session_shard(session_id))}:session:{session_id}"

    def session_active(self, session_id: str) -> str:
        """String: the record key of the session's active run (at most one at a time)."""
        return f"{self._session_base(session_id)}:active"

    def session_pending(self, session_id: str) -> str:
        """List: record keys of runs waiting behind the active one (multitask "enqueue")."""
        return f"{self._session_base(session_id)}:pending"

    # -- per client request ------------------------------------------------------------------
    def idempotency(self, scope: str, route: str, key_digest: str) -> str:
        """String (JSON): the run an ``Idempotency-Key`` started. ``scope`` names whose records
        they are: the id of the API key the caller proved (``idempotency.KEY_ID``), never a
        value computed from the key, which anyone reading Redis could test guesses against;
        ``route`` keeps ``/v1/runs`` and ``/v1/chat/completions`` apart; ``key_digest`` hashes
        the client's Idempotency-Key (any length)."""
        return f"{self.namespace}:idem:{scope}:{route}:{key_digest}"

    # -- per shard (one key each without a cluster) ------------------------------------------
    def queue_at(self, shard: int) -> str:
        """Sorted set: the shard's queued run ids, scored by the time they were queued (ms,
        Redis clock)."""
        return f"{self._base(shard)}:queue"

    def turn_order_at(self, shard: int) -> str:
        """Sorted set: the same run ids as the queue, scored by their turn (a virtual start time:
        ``runs/lua/prelude.lua`` ``enqueue``), so the lowest is the run a worker takes next and
        tenants with runs queued take turns by weight."""
        return f"{self._base(shard)}:turns"

    def fair_at(self, shard: int) -> str:
        """Hash: the shard's fair-turn state: ``v`` (the turn of the run taken last),
        ``l:<tenant>`` (the tenant's last turn) and ``n:<tenant>`` (its queued runs); and per
        tenant but ``default`` ``r:<tenant>`` (its running runs: up at claim, down when the run
        stops running) and ``h:<tenant>`` (its runs held: below)."""
        return f"{self._base(shard)}:fair"

    def held_prefix_at(self, shard: int) -> str:
        """What a tenant's held runs are named after, followed by the tenant: a sorted set of
        the shard's queued runs of a tenant at its running limit (``tenant_max_running``),
        out of the turn order -> their turn, until one of its runs stops running
        (``runs/lua/prelude.lua`` ``unhold``). They stay in the queue (they are ready)."""
        return f"{self._base(shard)}:held:"

    def tenant_rate(self, tenant: str) -> str:
        """Hash: the tenant's creation-rate bucket (``tokens``, ``at``; ``runs/lua/rate.lua``),
        expiring once full again."""
        return f"{self.namespace}:rate:{tenant}"

    def leases_at(self, shard: int) -> str:
        """Sorted set: the shard's running run id -> lease deadline (ms). Reapers scan its
        head."""
        return f"{self._base(shard)}:leases"

    def leases_heard_at(self, shard: int) -> str:
        """Hash: when a script about the shard's leases last ran (``at``, ms, Redis clock), the
        quiet its caller allowed (``quiet``, ms) and when the last silence a reader's entry
        cannot outlast ended (``back``): a silence longer than the quiet means Redis was away,
        and the shard's deadlines move on by it; for an entry's length after ``back`` no session
        turn is judged abandoned (``runs/lua/prelude.lua``: leases_heard, readers_silenced)."""
        return f"{self._base(shard)}:leases:heard"

    def blocked_at(self, shard: int) -> str:
        """Sorted set: record keys of the shard's session runs parked behind their session's
        active run (multitask "enqueue") -> parked at (ms). The scripts that park and promote
        keep it in step with the pending lists, so the blocked depth is one ZCARD a shard,
        never a scan."""
        return f"{self._base(shard)}:blocked"

    def stats_at(self, shard: int, minute: int) -> str:
        """Hash: the shard's counters of one minute (unix time // 60): ``claimed``,
        ``completed``, ``failed``, ``cancelled``, and ``waited_ms`` (the claimed runs' time in
        the queue, summed). Written by the run scripts, kept an hour; read (summed over shards)
        for throughput and the drain rate behind backpressure. Per tenant also
        ``claimed:<tenant>`` and ``waited_ms:<tenant>`` (the claim script, every tenant but
        ``default``, whose claims and waits are the rest) and, in shard 0's,
        ``refused:<tenant>`` (the API's 429s: ``queueview/tenants.py``)."""
        return f"{self._base(shard)}:stats:{minute}"

    def failures_at(self, shard: int) -> str:
        """Sorted set: the shard's recently failed run ids -> when they failed (ms, Redis
        clock), the last ``RECENT_FAILURES`` of them, kept an hour like the stats. Written by
        the terminal transition that counts the failure, so the dashboard and ``status`` list
        the failures they count."""
        return f"{self._base(shard)}:failures"

    def reaper_lease_at(self, shard: int) -> str:
        """String (cluster only): the id of the process that reaps the shard now, with a short
        TTL its holder renews (``runs/shard_leases.py``), so each shard is scanned by one
        process at a time and another takes it over within one lease of the holder's death."""
        return f"{self._base(shard)}:reaper"

    # The shard's keys of one run's own shard: what its scripts name beside the run's keys.
    def queue_of(self, run_id: str) -> str:
        return self.queue_at(self.shard_of(run_id))

    def turn_order_of(self, run_id: str) -> str:
        return self.turn_order_at(self.shard_of(run_id))

    def fair_of(self, run_id: str) -> str:
        return self.fair_at(self.shard_of(run_id))

    def held_prefix_of(self, run_id: str) -> str:
        return self.held_prefix_at(self.shard_of(run_id))

    def leases_of(self, run_id: str) -> str:
        return self.leases_at(self.shard_of(run_id))

    def leases_heard_of(self, run_id: str) -> str:
        return self.leases_heard_at(self.shard_of(run_id))

    def blocked_of(self, run_id: str) -> str:
        return self.blocked_at(self.shard_of(run_id))

    def stats_of(self, run_id: str, minute: int) -> str:
        return self.stats_at(self.shard_of(run_id), minute)

    def failures_of(self, run_id: str) -> str:
        return self.failures_at(self.shard_of(run_id))

    # -- webhook deliveries (per shard, beside the runs they are about) -------------------------
    def webhook_outbox_at(self, shard: int) -> str:
        """Sorted set: what the shard's webhook senders have to do -> when (ms, Redis clock).
        Members are deliveries (their ids, ``msg_…``) and, until a sender turns them into
        deliveries, the run events that want some (``e:<run_id>``, the terminal transition,
        queued by the script that ends the run; ``a:<run_id>:<request_id>``, an approval
        request). A sender that takes one pushes its score forward by its claim, so one killed
        mid-attempt leaves it due again for another (``webhooks/outbox.py``)."""
        return f"{self._base(shard)}:webhook:outbox"

    def webhook_delivery_prefix_at(self, shard: int) -> str:
        """What a delivery's hash key is named after, followed by its id (the outbox's scripts
        name a claimed delivery's hash from it)."""
        return f"{self._base(shard)}:webhook:delivery:"

    def webhook_delivery_at(self, shard: int, delivery_id: str) -> str:
        """Hash: one delivery (its target, body, state, attempts; ``webhooks/outbox.py``)."""
        return self.webhook_delivery_prefix_at(shard) + delivery_id

    def webhook_recent_at(self, shard: int) -> str:
        """Sorted set: the shard's newest delivery ids -> created (ms); the ops listing."""
        return f"{self._base(shard)}:webhook:recent"

    def webhook_pending_at(self, shard: int) -> str:
        """Sorted set: deliveries neither delivered nor dead -> created (ms): their count and
        the oldest's age, O(1) for metrics."""
        return f"{self._base(shard)}:webhook:pending"

    def webhook_dead_at(self, shard: int) -> str:
        """Sorted set: dead letters (schedule exhausted, 410 Gone, target refused) -> when
        (ms); kept ``webhook_dead_letter_seconds``, listed and redeliverable."""
        return f"{self._base(shard)}:webhook:dead"

    def webhook_outbox_of(self, run_id: str) -> str:
        """The outbox of a run's shard: what its record names (``webhook_outbox``) when the
        run wants deliveries, so the script that ends it queues them in the same step."""
        return self.webhook_outbox_at(self.shard_of(run_id))

    # Without a cluster, the one shard's keys by their historic names (tests, tools).
    @property
    def queue(self) -> str:
        return self.queue_at(self._only_shard())

    @property
    def leases(self) -> str:
        return self.leases_at(self._only_shard())

    @property
    def blocked(self) -> str:
        return self.blocked_at(self._only_shard())

    def stats(self, minute: int) -> str:
        return self.stats_at(self._only_shard(), minute)

    def _only_shard(self) -> int:
        if self.cluster:
            raise ValueError("on a cluster every shard has its own key: name the shard")
        return 0

    def tick(self, base_run_id: str) -> str:
        """String (cluster only): the run id one scheduled tick fires as, pinned by the first
        worker (``SET NX``) so every worker creates the same run in its session's shard."""
        return f"{self._base(0)}:tick:{base_run_id}"

    # -- global sets and channels ------------------------------------------------------------

    def wake_channel_at(self, shard: int) -> str:
        """Pub/sub: "a job was enqueued" in the shard, so idle workers poll at once instead of
        every 0.5 s. On a cluster a sharded channel (``SSUBSCRIBE``), like the shard's keys."""
        return f"{self._base(shard)}:wake"

    def control_channel_at(self, shard: int) -> str:
        """Pub/sub: stop requests and approval answers of the shard's runs, so the worker
        running a run hears of them at once. On a cluster a sharded channel."""
        return f"{self._base(shard)}:control"

    def wake_channel_of(self, run_id: str) -> str:
        return self.wake_channel_at(self.shard_of(run_id))

    def control_channel_of(self, run_id: str) -> str:
        return self.control_channel_at(self.shard_of(run_id))

    @property
    def wake_channel(self) -> str:
        return self.wake_channel_at(self._only_shard())

    @property
    def control_channel(self) -> str:
        return self.control_channel_at(self._only_shard())

    @property
    def workers(self) -> str:
        """Sorted set: worker id -> last heartbeat (ms)."""
        return f"{self.namespace}:workers"

    def worker(self, worker_id: str) -> str:
        """Hash: one worker's facts (slots, busy, seen_ms, metrics_port). On a cluster it carries
        the hash tag of :attr:`workers` (the whole name of that key), so a worker's heartbeat
        (``ZADD`` there, ``HSET`` + ``EXPIRE`` here) is one node's round trip, and the registry
        is read from one node."""
        if self.cluster:
            return f"{self.namespace}:worker:{{{self.workers}}}:{worker_id}"
        return f"{self.namespace}:worker:{worker_id}"

    @property
    def catalog(self) -> str:
        """String (JSON): the skills and toolsets the workers' backend offers, written by each
        worker at startup and then periodically with a TTL, so it lapses when no worker whose
        backend has a catalog is left. Read by the API for ``/v1/skills`` and ``/v1/toolsets``."""
        return f"{self.namespace}:catalog"

    @property
    def health_check(self) -> str:
        """String: the queue worker's periodic health line (arq writes it)."""
        return f"{self.namespace}:queue:health-check"
