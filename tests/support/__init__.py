"""What the tests and the benchmarks share: stand-ins for the world around hermes-queue and the
plumbing that starts and watches it. A package (``import tests.support.<module>``), never a path
to put on ``sys.path``; importing it starts nothing.

- ``polling``: :func:`eventually`, the one way to await a condition nothing signals;
- ``processes``: API replicas and workers as OS processes (:class:`Cluster`, :class:`Proc`);
- ``inprocess``: the API and a worker in the test's own event loop (``running_api``,
  ``running_worker``);
- ``fake_llm``: the deterministic OpenAI-compatible model (markers for tests, a fixed reply for
  benchmarks; what it answers: ``llm_replies``); ``fake_llm_process`` runs it as a process of
  its own;
- ``upstream``: upstream Hermes' own API server (``hermes gateway run``) in a private home;
- ``netns``, ``netns_proxy``, ``hosts``: simulated hosts and a deployment spread over them;
- ``redis_group``: a Redis primary, replicas and Sentinels; ``load``: a steady load of runs
  with SSE readers and what each reader saw; ``redis_cluster``: a loopback Redis Cluster;
- ``tenants``: tenant keys for the ownership tests; ``tenant_runs``: tenants' runs queued on a
  shard (fair turns, running limits);
- ``ports``: a port for a server a test configures before it starts it (``unclaimed_port``:
  never handed to another port-0 bind meanwhile).
"""
