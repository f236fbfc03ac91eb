"""``MEDIA:/abs/path.png`` tags in a reply become inline ``data:`` images, as upstream's API
server does (upstream-api.md §1.4), on the worker: only the worker can read the files its agent
wrote.

Why this exists: an agent that produced an image names it in its answer with a ``MEDIA:`` tag,
and a remote client cannot open a path on the agent's host. A tag is replaced by
``![image](data:<mime>;base64,…)`` only when the path is safe to deliver, and is otherwise left
exactly as written (so a refused tag stays visible instead of silently vanishing):

- the path is absolute (``~/`` expands; relative or traversal-only paths are refused), quoted
  with backticks or quotes when it holds spaces;
- symlinks are resolved first, and every check applies to the real file: it must exist and be a
  regular file with an image extension (png, jpg/jpeg, gif, webp, bmp);
- the delivery deny list refuses system and credential locations: ``/etc``, ``/proc``,
  ``/sys``, ``/dev``, ``/root``, ``/boot``, ``/var/log``, ``/var/lib``, ``/var/run``; in the
  home directory ``.ssh``, ``.aws``, ``.gnupg``, ``.kube``, ``.docker``, ``.config``,
  ``.azure``, ``.gcloud``, ``Library/Keychains``; and Hermes' own secret stores in its home
  (``.env``, ``auth.json``, ``config.yaml``, ``pairing/``, ``mcp-tokens/``, …). The running
  user's own home is not refused as a whole (a worker running as root keeps ``/root/work``
  deliverable); its credential directories are, by their own entries. Hermes' media caches
  (``image_cache``, ``cache/images``, …) are always deliverable, even under a refused prefix;
- at most 5 MB (5 × 1024 × 1024 bytes); a larger or unreadable file is left as a tag.

The tag matcher reads a path the way upstream's does, quirks included, so both servers turn the
same reply into the same text: an unquoted path runs, spaces included, to the *last* image
extension on its line, so two unquoted tags on one line name one path that does not exist and
both stay as written (one tag per line, or quoted paths, inline).
"""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path

MAX_INLINE_BYTES = 5 * 1024 * 1024
IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".bmp": "image/bmp",
}
DENIED_PREFIXES = (
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/root",
    "/boot",
    "/var/log",
    "/var/lib",
    "/var/run",
)
DENIED_IN_HOME = (
    ".ssh",
    ".aws",
    ".gnupg",
    ".kube",
    ".docker",
    ".config",
    ".azure",
    ".gcloud",
    "Library/Keychains",
)
# Hermes keeps credentials at the top of its home; these are never delivered.
DENIED_IN_HERMES_HOME = (
    ".env",
    "auth.json",
    "auth.lock",
    "credentials",
    "config.yaml",
    ".anthropic_oauth.json",
    "google_token.json",
    "google_oauth_pending.json",
    "auth/google_oauth.json",
    "webhook_subscriptions.json",
    "cache/bws_cache.json",
    "pairing",
    "mcp-tokens",
)
# Where Hermes writes the media its tools make: deliverable wherever the home lives.
HERMES_MEDIA_CACHES = (
    "image_cache",
    "audio_cache",
    "video_cache",
    "document_cache",
    "browser_screenshots",
    "cache/images",
    "cache/audio",
    "cache/videos",
    "cache/documents",
    "cache/screenshots",
)

_EXTENSIONS = "|".join(sorted((ext.lstrip(".") for ext in IMAGE_TYPES), key=len, reverse=True))
# MEDIA: then a quoted path (which may hold spaces), or an absolute, home or drive-letter path
# running (spaces included) to an image extension that ends a token. Upstream's matcher is
# greedy the same way, so a tag's reach, and whether a later tag on the line is still seen,
# is the same on both servers (a drive-letter path never validates on a POSIX worker).
_TAG = re.compile(
    r"""[`"']?MEDIA:\s*"""
    r"""(?P<path>`[^`\n]+`|"[^"\n]+"|'[^'\n]+'|"""
    rf"""(?:~/|/|[A-Za-z]:[/\\])\S+(?:[^\S\n]+\S+)*?\.(?:{_EXTENSIONS}))"""
    r"""(?=[\s`"',;:)\]}]|$)[`"']?""",
    re.IGNORECASE,
)
_WRAPPERS = "`\"'"


def inline_media(text: str, *, hermes_home: str = "") -> str:
    """``text`` with every deliverable ``MEDIA:`` image tag replaced by an inline image.
    ``hermes_home`` is the agent's Hermes home (its secrets are refused, its media caches
    allowed); empty when the backend has none."""
    if not text or "MEDIA:" not in text.upper():
        return text
    policy = _Policy(hermes_home)

    def replace(match: re.Match[str]) -> str:
        return policy.data_image(match.group("path")) or match.group(0)

    return _TAG.sub(replace, text)


class _Policy:
    """The deny list and media caches, resolved once per reply."""

    def __init__(self, hermes_home: str) -> None:
        self.home = _resolved(Path(os.path.expanduser("~")))
        hermes = Path(os.path.expanduser(hermes_home)) if hermes_home else None
        self.allowed = [_resolved(hermes / sub) for sub in HERMES_MEDIA_CACHES] if hermes else []
        denied = [Path(prefix) for prefix in DENIED_PREFIXES]
        denied += [Path(os.path.expanduser("~")) / sub for sub in DENIED_IN_HOME]
        if hermes is not None:
            denied += [hermes / sub for sub in DENIED_IN_HERMES_HOME]
        self.denied = [_resolved(path) for path in denied]

    def data_image(self, raw: str) -> str | None:
        path = self.deliverable(raw)
        if path is None or path.suffix.lower() not in IMAGE_TYPES:
            return None
        try:
            if path.stat().st_size > MAX_INLINE_BYTES:
                return None
            encoded = base64.b64encode(path.read_bytes()).decode("ascii")
        except OSError:
            return None
        return f"![image](data:{IMAGE_TYPES[path.suffix.lower()]};base64,{encoded})"

    def deliverable(self, raw: str) -> Path | None:
        """The real file a tag names, when it may be delivered; else None."""
        candidate = raw.strip()
        if len(candidate) >= 2 and candidate[0] == candidate[-1] and candidate[0] in _WRAPPERS:
            candidate = candidate[1:-1].strip()
        candidate = candidate.lstrip(_WRAPPERS).rstrip(_WRAPPERS + ",.;:)}]")
        try:
            path = Path(os.path.expanduser(candidate))
            if not candidate or not path.is_absolute():
                return None
            real = path.resolve(strict=True)
            if not real.is_file():
                return None
        except (OSError, RuntimeError, ValueError):  # missing, a loop, a NUL byte
            return None
        if any(real.is_relative_to(root) for root in self.allowed):
            return real
        return None if self._refused(real) else real

    def _refused(self, real: Path) -> bool:
        for denied in self.denied:
            if real == denied or real.is_relative_to(denied):
                if denied == self.home:  # the user's own home; its secrets have own entries
                    continue
                return True
        return False


def _resolved(path: Path) -> Path:
    try:
        return path.resolve(strict=False)
    except (OSError, RuntimeError, ValueError):
        return path
