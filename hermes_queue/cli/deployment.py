"""Which deployment an operator command talks to, and how it finds a running ``hermes-queue
dev``: a state file dev writes.

``hermes-queue dev`` runs a private Redis on a free port with a generated key, so a CLI run in
another terminal, reading the defaults, would talk to whatever Redis listens on 6379 (or to
none) and report "0 live workers" about an unrelated deployment. So dev writes where it is to
``$XDG_STATE_HOME/hermes-queue/dev.json`` (default ``~/.local/state/hermes-queue/dev.json``;
mode 0600: it holds the API key) and removes it when it stops. The operator commands (``status``,
``runs``, ``tail``, ``check``) read it when ``redis_url`` is not set at all, take from it what
was not set (``redis_url``, ``api_key``, ``store_url``, ``host``/``port``) and say so on their
first line. A file whose process is gone (dev was killed) is ignored, and said to be stale.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hermes_queue.config import Settings
from hermes_queue.config.urls import sqlite_path
from hermes_queue.logs import mask_url

STATE_FILE = "dev.json"
SOURCE = "hermes-queue dev"


@dataclass(frozen=True)
class DevState:
    pid: int
    redis_url: str
    api_key: str
    host: str
    port: int
    store_url: str
    namespace: str

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def settings(self) -> dict[str, Any]:
        """What it sets, by flat name."""
        return {
            "redis_url": self.redis_url,
            "api_key": self.api_key,
            "host": self.host,
            "port": self.port,
            "store_url": self.store_url,
            "namespace": self.namespace,
        }


def state_path(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "hermes-queue" / STATE_FILE


def absolute_store_url(url: str) -> str:
    """A relative SQLite path made absolute: the CLI may run in another directory."""
    path = sqlite_path(url)
    if path is None or path == ":memory:" or Path(path).is_absolute():
        return url
    return f"sqlite:///{Path(path).resolve()}"


def write(settings: Settings) -> Path:
    """Record this dev process (0600, replacing any other dev's record: the latest wins)."""
    state = DevState(
        pid=os.getpid(),
        redis_url=settings.redis.url,
        api_key=settings.api.api_key,
        host=settings.api.host,
        port=settings.api.port,
        store_url=absolute_store_url(settings.store.url),
        namespace=settings.redis.namespace,
    )
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staged = path.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(asdict(state), handle)
    os.replace(staged, path)  # whole or not at all: a reader never sees half a file
    return path


def remove() -> None:
    """Forget this process's record (another dev's, written since, is left alone)."""
    found = _load(state_path())
    if found is not None and found.pid == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            state_path().unlink()


def _load(path: Path) -> DevState | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return DevState(**{k: data[k] for k in DevState.__dataclass_fields__})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running() -> tuple[DevState | None, str | None]:
    """The running dev's record, or None with why not when there is a record (stale)."""
    try:
        path = state_path()
    except RuntimeError:  # no home directory to look in (a container's nameless user)
        return None, None
    found = _load(path)
    if found is None:
        return None, None
    if not _alive(found.pid):
        return (
            None,
            f"ignoring {path}: the hermes-queue dev that wrote it (pid {found.pid}) is gone",
        )
    return found, None


@dataclass(frozen=True)
class Deployment:
    """The settings an operator command uses and where their ``redis_url`` came from."""

    settings: Settings
    # HERMES_QUEUE_REDIS_URL, "config file …", "hermes-queue dev, pid N" or "default".
    source: str
    # Why a dev state file found was not used (its process is gone), if one was.
    stale: str | None = None

    @property
    def line(self) -> str:
        """``redis://127.0.0.1:40123/0 (hermes-queue dev, pid 4242)``: the first line of
        ``status`` and ``runs``."""
        return f"{mask_url(self.settings.redis.url)} ({self.source})"

    @property
    def default(self) -> bool:
        return self.source == "default"


def resolve(settings: Settings, sources: dict[str, str]) -> Deployment:
    """``settings`` as given when ``redis_url`` was set; else a running dev's, for what was not
    set; else the defaults, said to be the defaults."""
    if "redis_url" in sources:
        return Deployment(settings, sources["redis_url"])
    dev, stale = running()
    if dev is None:
        return Deployment(settings, "default", stale)
    given = {name: value for name, value in dev.settings().items() if name not in sources}
    return Deployment(settings.replace(**given), f"{SOURCE}, pid {dev.pid}")
