"""The job queue, over arq: the only code that knows arq.

- ``jobs.py``: what the queue holds (run ids in one sorted set, no per-job keys), the queue's
  own timeout for a delivery, and the msgpack serializer arq is given should it ever encode a
  job.
- ``connection.py``: arq's connection settings for ``redis_url`` (its own Sentinel support for
  a Sentinel URL).
- ``worker.py``: arq's ``Worker`` as the process shell (signals, drain, health line, burst
  mode), woken on enqueue and surviving Redis outages, with its per-job protocol replaced: a
  poll reads the queue's head and hands each run id to a ``JobHandler`` (the worker process,
  ``workers/worker.py``, which never sees arq), whose claim is the pickup. ``queue_worker()``
  configures it.

The arq versions this was checked against are pinned in pyproject.toml;
tests/jobqueue/test_arq_contract.py fails loudly when an arq upgrade changes what is relied on.
"""
