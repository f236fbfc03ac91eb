"""Scheduled agent runs (upstream's cron jobs, ``/api/jobs``) on the queue.

``parsing`` (the schedule forms upstream accepts, and their ticks), ``prompt_scan`` (the prompt
threat check), ``definitions`` (job bodies validated, jobs rendered in upstream's shape),
``firing`` (a fire becomes a run, once per tick, and is recorded under its job) and
``scheduler`` (the pass every worker runs). Jobs live in the SQL store (``store/jobs.py``).
"""
