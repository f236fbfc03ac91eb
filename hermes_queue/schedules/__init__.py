"""Scheduled agent runs (upstream's cron jobs, ``/api/jobs``) on the queue.

``parsing``: the schedule forms upstream accepts, and their ticks.
"""
