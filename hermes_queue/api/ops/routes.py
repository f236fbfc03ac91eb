"""The operations and discovery route rows: health, capabilities, models and readiness, the
workers' catalog, metrics and the queue, the dashboard. Each row is the route and what
``/openapi.json`` says of it (``api/endpoint.py``)."""

from __future__ import annotations

from hermes_queue.api.endpoint import Answer, Endpoint, ok, stream
from hermes_queue.api.ops import answers as out
from hermes_queue.api.ops import dashboard, discovery, operations, skills, webhooks

LIVENESS = ok(out.Health)
QUEUE_PAGE = operations.QueuePageQuery

# Discovery (upstream-api.md §5) and what the workers' backend offers.
DISCOVERY = [
    Endpoint("GET", "/health", discovery.health, "Liveness", "discovery", LIVENESS, public=True),
    Endpoint("GET", "/v1/health", discovery.health, "Liveness", "discovery", LIVENESS, public=True),
    Endpoint(
        "GET",
        "/health/ready",
        discovery.ready,
        "Readiness for load balancers",
        "discovery",
        {
            200: Answer("Serving: send it work", out.Readiness),
            503: Answer("Draining (stopping): send it no new work", out.Readiness),
        },
        public=True,
    ),
    Endpoint(
        "GET",
        "/v1/capabilities",
        discovery.capabilities,
        "Capabilities",
        "discovery",
        ok(out.Capabilities),
    ),
    Endpoint("GET", "/v1/models", discovery.models, "Models", "discovery", ok(out.ObjectList)),
    Endpoint(
        "GET",
        "/health/detailed",
        discovery.health_detailed,
        "Readiness",
        "discovery",
        ok(out.HealthDetailed),
        operator=True,
    ),
    Endpoint("GET", "/v1/skills", skills.skills, "Skills", "discovery", ok(out.ObjectList)),
    Endpoint("GET", "/v1/toolsets", skills.toolsets, "Toolsets", "discovery", ok(out.ObjectList)),
]

# Operations: metrics, the queue, the operator's dashboard.
OPERATIONS = [
    Endpoint(
        "GET",
        "/metrics",
        operations.metrics,
        "Prometheus metrics",
        "operations",
        {200: Answer("Prometheus text", None, "text/plain")},
        operator=True,
    ),
    Endpoint(
        "GET",
        "/v1/queue",
        operations.queue,
        "Queue snapshot",
        "operations",
        ok(out.Queue),
        query=QUEUE_PAGE,
        operator=True,
    ),
    Endpoint(
        "GET",
        "/v1/queue/stream",
        operations.queue_stream,
        "Queue snapshots",
        "operations",
        {200: stream(out.QueueSnapshot, "event: queue frames")},
        query=QUEUE_PAGE,
        operator=True,
    ),
    *[
        Endpoint(
            "GET",
            path,
            dashboard.serve_asset,
            "The dashboard",
            "operations",
            {200: Answer("A page or asset", None, "text/html")},
            public=True,
        )
        for path in dashboard.ASSETS
    ],
]

# Webhook deliveries: the recent ones and dead letters, one by id, redelivery.
WEBHOOKS = [
    Endpoint(
        "GET",
        "/v1/webhooks/deliveries",
        webhooks.list_deliveries,
        "Webhook deliveries",
        "operations",
        ok(out.WebhookDeliveryList),
        query=webhooks.DeliveryListQuery,
        operator=True,
    ),
    Endpoint(
        "GET",
        "/v1/webhooks/deliveries/{delivery_id}",
        webhooks.get_delivery,
        "A webhook delivery",
        "operations",
        {**ok(out.WebhookDelivery), 404: Answer("No such delivery")},
        operator=True,
    ),
    Endpoint(
        "POST",
        "/v1/webhooks/deliveries/{delivery_id}/redeliver",
        webhooks.redeliver,
        "Redeliver a webhook",
        "operations",
        {
            202: Answer("Due now, on a fresh schedule", out.WebhookDelivery),
            404: Answer("No such delivery"),
        },
        operator=True,
    ),
]

ENDPOINTS = [*DISCOVERY, *OPERATIONS, *WEBHOOKS]
