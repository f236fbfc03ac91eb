"""What the benchmark scripts share; the scripts in ``bench/`` stay thin.

- ``report``: percentiles, medians, CPU and memory readings, the table and ``BENCH_JSON`` line;
- ``deploy``: a private Redis and real API/worker processes in a fresh namespace
  (:class:`Deployment`, on ``tests.support.processes``);
- ``traffic``: the client side over HTTP (sessions, runs, SSE, chat completion streams, session
  chat turns);
- ``prober``: URLs polled from a separate process while a benchmark runs;
- ``closed_loop``: closed-loop echo runs at a concurrency (``throughput``, ``redis_cost``);
- ``sides``: a server under test and its CPU by role: upstream Hermes' own API server and
  hermes-queue with the ``hermes`` backend, both on the fake LLM;
- ``sse_count``: cheap SSE counting for thousands of clients;
- ``sync_redis``: redis-py's sync client's replies, typed (``info``);
- ``script_calls``: the run scripts' calls as ``RunRepository`` and ``Attempt`` make them,
  recorded once per call shape and packed for any run (``capacity_load``'s raw ``EVALSHA``);
- per benchmark, what would make its script long: ``chaos_figures`` (``chaos``), ``balancer``
  and ``rollout_clients`` (``rollout``), ``chat_phases`` (``hermes_vs_upstream``);
- child programs, run as ``python -m bench.lib.<name>``: ``sse_raw`` (the raw aiohttp SSE
  reference server), ``inflight`` (background load), ``floor_agent`` (the bare agent turn).

The fake LLM, the upstream launcher and the process launchers are the tests' own
(``tests.support``), imported as a package.
"""
