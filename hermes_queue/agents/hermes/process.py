"""One-time preparation of a worker process that runs Hermes agents.

Hermes reads ``HERMES_HOME`` (config, skills, state) from the environment, so it is set before
any Hermes module is imported. Approval waits are decided by hermes-queue: ``sink.approval``
denies after ``approval_timeout_seconds`` and records that in Redis for every replica to see,
then hands the answer to the parked agent thread. Hermes' own wait (``approvals.timeout`` in
its config, 60 s by default) must therefore never end first, or the agent would move on while
clients still see ``waiting_for_approval``; it is lifted to a day. The agent thread is still
released at the end of every turn (``unregister_gateway_notify``).

Hermes' logging setup (run by its first agent) adds its own files under ``HERMES_HOME/logs`` and
lowers the root logger to INFO for them. It runs here instead, and the handlers the worker
already had keep the level the worker was configured with (``log_level``), so Hermes' INFO
lines go to its ``agent.log``, not to the worker's output.

What an agent prints for a console (retries, fallbacks, interruptions: emoji status lines through
its ``_print_fn``) becomes a worker log record instead (:func:`route_console`): in a
``log_format = "json"`` worker a raw line would break the stream a log shipper parses, and a
record passes the worker's redaction.
"""

from __future__ import annotations

import logging
import os
import threading

from hermes_queue.agents.hermes import tls

log = logging.getLogger(__name__)

_HERMES_WAIT_SECONDS = 86_400
_lock = threading.Lock()
_prepared_home: str | None = None


class HermesUnavailable(RuntimeError):
    """The ``hermes-agent`` package is not installed (``pip install 'hermes-queue[hermes]'``)."""


def prepare(hermes_home: str = "") -> None:
    """Idempotent; a second call with another home is refused (Hermes reads it once)."""
    global _prepared_home
    with _lock:
        if _prepared_home is not None:
            if hermes_home and hermes_home != _prepared_home:
                raise RuntimeError(
                    f"this process already runs Hermes with HERMES_HOME={_prepared_home!r}"
                )
            return
        if hermes_home:
            os.environ["HERMES_HOME"] = os.path.abspath(os.path.expanduser(hermes_home))
            os.makedirs(os.environ["HERMES_HOME"], exist_ok=True)
        try:
            from tools import approval
        except ImportError as exc:
            raise HermesUnavailable(
                "the hermes backend needs the hermes-agent package: "
                "pip install 'hermes-queue[hermes]'"
            ) from exc
        tls.install()
        _set_up_hermes_logging()
        if hasattr(approval, "_get_approval_timeout"):
            approval._get_approval_timeout = lambda: _HERMES_WAIT_SECONDS
        else:  # a Hermes release that moved it: its own timeout may then end waits early
            log.warning("hermes: cannot lift Hermes' own approval timeout in this version")
        _prepared_home = os.environ.get("HERMES_HOME", "")


def _set_up_hermes_logging() -> None:
    import hermes_logging

    root = logging.getLogger()
    configured = root.level
    ours = [handler for handler in root.handlers if handler.level == logging.NOTSET]
    hermes_logging.setup_logging()
    if root.level < configured:
        for handler in ours:
            handler.setLevel(configured)


console_log = logging.getLogger("hermes_queue.agents.hermes.console")


def _print_to_log(*args: object, sep: str | None = " ", **_ignored: object) -> None:
    text = (" " if sep is None else sep).join(str(arg) for arg in args).strip()
    if text:
        console_log.info("%s", text)


def route_console(agent: object) -> None:
    """Send an agent's console output to the worker log (module docstring). Its animated
    spinners, which Hermes starts once output has a sink, stay off: frames are not records."""
    agent._print_fn = _print_to_log  # type: ignore[attr-defined]
    agent._should_start_quiet_spinner = lambda: False  # type: ignore[attr-defined]
