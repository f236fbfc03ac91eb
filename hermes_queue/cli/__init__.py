"""The ``hermes-queue`` command line: ``commands`` the click group (parse, dispatch, no logic),
``serve`` the processes it starts (API, worker, dev), ``ops`` the operator's views (status,
runs), ``jobs`` scheduled jobs, ``check`` the readiness probe."""

from hermes_queue.cli.commands import main

__all__ = ["main"]
