"""Every Prometheus metric of hermes-queue, and the only place one is defined (STYLE lesson 11).

Names are ``hermes_queue_*`` with unit suffixes; labels are low-cardinality states and outcomes,
never a run or session id. Each process object owns its own ``CollectorRegistry`` rather than
the global one, so several apps or workers built in one process (tests, ``hermes-queue dev``)
never clash over a name.

Two views, on purpose:

- the **API** (``GET /metrics``) exports the cluster's queue as read from Redis at scrape time
  (depth by state, oldest ready age, workers, slots, ``desired_workers``); every replica
  reports the same figures, so aggregate them with ``max``, not ``sum``;
- **workers** (their own port) export what only they observe: pickup latency, time to first
  event, run duration, and the turns they are running.

``hermes_queue_runs_total{outcome}`` is counted by whichever process performed the terminal
transition (a worker ending its turn, any reaper, an API stopping a queued run), so
``sum by (outcome)`` over all processes counts every run once.

Metrics are observers: a failing observation is logged and counted in
``hermes_queue_observer_errors_total`` and never reaches the run or the request.

The package: ``labels.py`` the label values and buckets every metric shares, ``scrape.py``
the collectors the API reads from Redis at scrape time, ``processes.py`` each process's metrics
(API, worker) and how they are served.
"""
