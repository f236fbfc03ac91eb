"""The job queue, over arq: the only code that knows arq's key names, job format and worker
internals.

- ``jobs.py``: the job a run is delivered as (msgpack, carrying only the run id), the Redis keys
  arq keeps per job, and arq's timeout and TTL rules. The run scripts (``runs/lua``) write and
  drop arq's keys, but every arq-specific value they use (key names, payload bytes, TTLs) is an
  argument they get from here.
- ``worker.py``: arq's ``Worker``, made to wake on enqueue, survive Redis outages and stop
  cleanly, and ``queue_worker()``, which configures it for hermes-queue and hands every delivery
  to a ``JobHandler`` (the worker process, ``workers/worker.py``), which never sees arq.

The arq versions this was checked against are pinned in pyproject.toml;
tests/jobqueue/test_arq_contract.py fails loudly when an arq upgrade changes what is relied on.
"""
