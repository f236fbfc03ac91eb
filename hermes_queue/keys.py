"""Every Redis key name hermes-queue uses. Nothing else formats a key.

All keys live under one namespace so deployments (and tests) can share a Redis without
colliding. The keys of one run share a hash tag (``{run_id}``) so they sit in one Redis Cluster
slot and the Lua scripts that touch several of them stay legal there.

The queue is one sorted set of run ids; no per-job key exists (``jobqueue/jobs.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    namespace: str

    # -- per run (one hash tag) --------------------------------------------------------------
    def run(self, run_id: str) -> str:
        """Hash: the run record (status, attempt, request, output...)."""
        return f"{self.namespace}:run:{{{run_id}}}"

    def events(self, run_id: str) -> str:
        """Stream: the run's canonical events, in order. Also the name of the pub/sub channel
        on which the scripts that append to it publish each entry (streams/hub.py)."""
        return f"{self.namespace}:run:{{{run_id}}}:events"

    def steps(self, run_id: str) -> str:
        """List (JSON): the run's recorded agent steps, in order (agents/steps.py): each model
        call with the message it produced, each tool call's start and result. Appended with
        the events before them in one fenced script (``append_step.lua``); a later attempt
        resumes after the last one. Never trimmed; kept as long as the run record."""
        return f"{self.namespace}:run:{{{run_id}}}:steps"

    def readers(self, run_id: str) -> str:
        """Sorted set: the API processes whose clients read the run's events -> until when
        (ms, Redis clock; streams/presence.py). A run started by a request that reads it is
        abandoned once nobody does, and the next turn of its session supersedes it."""
        return f"{self.namespace}:run:{{{run_id}}}:readers"

    # -- per session --------------------------------------------------------------------
    def session_active(self, session_id: str) -> str:
        """String: the record key of the session's active run (at most one at a time)."""
        return f"{self.namespace}:session:{{{session_id}}}:active"

    def session_pending(self, session_id: str) -> str:
        """List: record keys of runs waiting behind the active one (multitask "enqueue")."""
        return f"{self.namespace}:session:{{{session_id}}}:pending"

    # -- per client request ------------------------------------------------------------------
    def idempotency(self, scope: str, route: str, key_digest: str) -> str:
        """String (JSON): the run an ``Idempotency-Key`` started. ``scope`` names whose records
        they are: the id of the API key the caller proved (``idempotency.KEY_ID``), never a
        value computed from the key, which anyone reading Redis could test guesses against;
        ``route`` keeps ``/v1/runs`` and ``/v1/chat/completions`` apart; ``key_digest`` hashes
        the client's Idempotency-Key (any length)."""
        return f"{self.namespace}:idem:{scope}:{route}:{key_digest}"

    # -- global sets and channels ------------------------------------------------------------
    @property
    def queue(self) -> str:
        """Sorted set: queued run ids, scored by the time they were queued (ms, Redis clock)."""
        return f"{self.namespace}:queue"

    @property
    def leases(self) -> str:
        """Sorted set: running run id -> lease deadline (ms). The reaper scans its head."""
        return f"{self.namespace}:leases"

    @property
    def blocked(self) -> str:
        """Sorted set: record keys of session runs parked behind their session's active run
        (multitask "enqueue") -> parked at (ms). The scripts that park and promote keep it in
        step with the pending lists, so the blocked depth is one ZCARD, never a scan."""
        return f"{self.namespace}:blocked"

    def stats(self, minute: int) -> str:
        """Hash: counters of one minute (unix time // 60): ``claimed``, ``completed``,
        ``failed``, ``cancelled``. Written by the run scripts, kept an hour; read for
        throughput and for the drain rate behind backpressure's Retry-After."""
        return f"{self.namespace}:stats:{minute}"

    @property
    def wake_channel(self) -> str:
        """Pub/sub: "a job was enqueued", so idle workers poll at once instead of every 0.5 s."""
        return f"{self.namespace}:wake"

    @property
    def control_channel(self) -> str:
        """Pub/sub: stop requests, so the worker running a run hears of it at once."""
        return f"{self.namespace}:control"

    @property
    def workers(self) -> str:
        """Sorted set: worker id -> last heartbeat (ms)."""
        return f"{self.namespace}:workers"

    def worker(self, worker_id: str) -> str:
        """Hash: one worker's facts (host, pid, slots, started_at)."""
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
