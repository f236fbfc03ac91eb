"""Starting an agent turn over HTTP, the same for every endpoint that starts one: the turn's
runtime (provider and model), its ``Idempotency-Key``, admission under load, and the one
``enqueue_turn`` that writes the run."""
