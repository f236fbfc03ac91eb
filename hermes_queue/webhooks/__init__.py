"""Completion webhooks (docs/deploy.md, "Webhooks"; ARCHITECTURE §8: webhooks are run effects).

A run that wants deliveries (a ``webhook`` of its own, or the deployment's
``webhook_subscriptions``) names its shard's outbox in its record; the one script that ends it
queues its end there in the same step (``runs/lua/prelude.lua`` ``finish``), and an approval
request is queued by the script that asks it. Worker processes send (``sender.py``): each run
event becomes one delivery per target (``messages.py``), kept in Redis beside the run's shard
(``outbox.py``), signed to the Standard Webhooks spec (``signing.py``), sent to addresses
checked at connect time (``guard.py``) and retried on the spec's schedule (``attempt.py``), at
least once under one ``webhook-id``; what exhausts its schedule is a dead letter, kept and
redeliverable.
"""
