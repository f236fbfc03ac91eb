"""The ``hermes`` backend: Hermes' own ``AIAgent`` in a worker (extra ``hermes-queue[hermes]``).

Modules: ``backend`` (scheduling a turn), ``conversation`` (the turn inside Hermes, on its
thread), ``bridge`` (agent-thread callbacks onto the event sink),
``warm`` (agents kept between a session's turns), ``transcript`` (message shapes), ``installed``
(its skills and toolsets, for the API), ``process`` and ``tls`` (one-time process preparation).
Nothing here imports Hermes at import time.
"""
