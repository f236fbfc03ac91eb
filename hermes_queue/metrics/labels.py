"""The label values and histogram buckets of hermes-queue's metrics: every value a label can
take is named here, so each series exists from the start and cardinality stays bounded."""

from __future__ import annotations

from collections.abc import Collection

from hermes_queue.tenancy.keys import DEFAULT_TENANT

OUTCOMES = ("completed", "failed", "cancelled")
JOB_TRIGGERS = ("schedule", "manual")
QUEUE_STATES = ("ready", "deferred", "running", "blocked")
TENANT_STATES = ("ready", "running", "held")
# The tenant label of a tenant not configured (a record from before a key was removed).
OTHER_TENANT = "other"
# The API dialects, as a drain cut counts them (api/drain.py).
DIALECTS = ("hermes", "openai")
WEBHOOK_RESULTS = ("2xx", "3xx", "4xx", "5xx", "timeout", "error", "refused")
WEBHOOK_OUTCOMES = ("delivered", "gone", "dead")
# Waits: from instant (an idle worker woken by pub/sub) to minutes (a backlog).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# Agent turns: a second to an hour (job_timeout_seconds).
DURATION_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


def tenant_label(tenant: str, known: Collection[str]) -> str:
    """``tenant`` as a label value: the configured tenants and ``default`` by name, anything
    else ``other``, so the label's values are bounded by the configuration."""
    return tenant if tenant in known or tenant == DEFAULT_TENANT else OTHER_TENANT
