"""The queue as operators and backpressure see it: one snapshot behind ``/metrics``,
``GET /v1/queue``, the dashboard and the CLI (``snapshot.py``), what it holds (``figures.py``),
the runs it lists (``lists.py``) and its figures per tenant (``tenants.py``)."""
