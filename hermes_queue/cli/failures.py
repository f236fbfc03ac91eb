"""How every ``hermes-queue`` command fails: one ``error: …`` line on stderr, and an exit code
that says whose problem it is.

- 2: the configuration (a setting's value can never work: ``ConfigError``);
- 1: the situation at run time (a port already taken, a dependency down, a run not found, any
  other failure).

No traceback unless asked for (``hermes-queue --debug …``, or ``log_level = DEBUG``): an
operator reading a crash-looping pod's log wants the one line, a developer the stack. Every line
goes through the log redaction (``logs.redact``), so a password quoted by a driver's message is
masked here as in the logs.
"""

from __future__ import annotations

import sys
import traceback
from typing import IO, Any

import click

from hermes_queue.config import ConfigError
from hermes_queue.logs import redact

EXIT_RUNTIME = 1
EXIT_CONFIG = 2
# ctx.meta key: traceback wanted (``--debug``, or the settings' log level is DEBUG).
DEBUG = "hermes_queue.debug"


class StartupError(Exception):
    """A process cannot start for a reason outside its settings' values (the port is taken by
    another process): exit 1. The message names the setting to change."""


class Failure(click.ClickException):
    """One ``error: …`` line on stderr, exit 1."""

    exit_code = EXIT_RUNTIME

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {redact(self.format_message())}", err=True)


class ConfigFailure(Failure):
    """A bad setting: exit 2."""

    exit_code = EXIT_CONFIG


def wants_debug() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().meta.get(DEBUG))


def as_failure(exc: Exception) -> Failure:
    """The failure ``exc`` is reported as (the traceback printed first when debugging)."""
    if isinstance(exc, ConfigError):
        return ConfigFailure(str(exc))
    if isinstance(exc, StartupError):
        return Failure(str(exc))
    if wants_debug():
        print(redact("".join(traceback.format_exception(exc))), file=sys.stderr, end="")
        return Failure(f"{type(exc).__name__}: {exc}")
    return Failure(f"{type(exc).__name__}: {exc} (hermes-queue --debug … shows the traceback)")


class FailingCleanly(click.Group):
    """The command group whose commands fail as this module says, whatever they raise."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            raise as_failure(exc) from None
