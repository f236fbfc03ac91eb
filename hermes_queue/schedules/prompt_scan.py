"""The threat check upstream runs on a job's prompt before accepting it (upstream-api.md §2).

A scheduled prompt runs unattended, again and again, with the tools of the worker: upstream
refuses, at create and update time, prompts that read like an injection or an exfiltration
recipe rather than a task. Same categories and the same ``Blocked: …`` answer here; the
patterns are written for this project. It is a tripwire for the obvious, not a sandbox.
"""

from __future__ import annotations

import re
import unicodedata

# Zero-width characters, invisible math operators, the BOM and bidirectional controls: text a
# reviewer cannot see but the model reads.
_INVISIBLE = frozenset(
    [chr(c) for c in (0x200B, 0x200C, 0x200D, 0x2060, 0x2062, 0x2063, 0x2064, 0xFEFF)]
    + [chr(c) for c in range(0x202A, 0x202F)]
    + [chr(c) for c in range(0x2066, 0x206A)]
)
_ZWJ = "\u200d"
_VARIATION_SELECTOR = "\ufe0f"

_SECRET_VAR = r"\$\{?\w*(?:KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|API)\w*\}?"
_THREATS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        (
            "prompt_injection",
            r"\bignore\b(?:\s+\w+)*?\s+(?:previous|prior|above|all)\b(?:\s+\w+)*?\s+instructions",
        ),
        ("deception_hide", r"\bdo\s+not\s+tell\s+the\s+user\b"),
        ("sys_prompt_override", r"\bsystem\s+prompt\s+override\b"),
        ("disregard_rules", r"\bdisregard\s+(?:your|all|any)\s+(?:instructions|rules|guidelines)"),
        ("read_secrets", r"\bcat\s+[^\n]*(?:\.env|credentials|\.netrc|\.pgpass)"),
        ("ssh_backdoor", r"authorized_keys"),
        ("sudoers_mod", r"/etc/sudoers|\bvisudo\b"),
        ("destructive_root_rm", r"\brm\s+-rf\s+/"),
        ("exfil_curl_url", rf"\bcurl\s+[^\n]*https?://[^\s\"'`]*{_SECRET_VAR}"),
        ("exfil_wget_url", rf"\bwget\s+[^\n]*https?://[^\s\"'`]*{_SECRET_VAR}"),
        (
            "exfil_curl_data",
            rf"\bcurl\s+[^\n]*(?:--data(?:-raw|-binary|-urlencode)?|-d|--form|-F)\s+[^\n]*"
            rf"{_SECRET_VAR}",
        ),
        ("exfil_wget_post", rf"\bwget\s+[^\n]*--post-(?:data|file)=[^\n]*{_SECRET_VAR}"),
        (
            "exfil_curl_auth_header",
            rf"\bcurl\s+[^\n]*(?:-H|--header)\s+[\"']Authorization:\s*(?:Bearer|token)\s+"
            rf"{_SECRET_VAR}[\"']",
        ),
    )
)
# The one Authorization-header call upstream lets through: GitHub's API with a token variable.
_GITHUB_AUTH_CALL = re.compile(
    rf"\bcurl\s+[^\n]*(?:-H|--header)\s+[\"']Authorization:\s*token\s+{_SECRET_VAR}[\"']"
    r"\s+[\"']?https://api\.github\.com\b",
    re.IGNORECASE,
)


def _is_emoji(char: str) -> bool:
    return unicodedata.category(char) == "So"


def _emoji_joiner(text: str, index: int) -> bool:
    """A ZWJ gluing two emoji (👨‍👩‍👧) is part of the picture, not hidden text."""
    left, right = index - 1, index + 1
    while left >= 0 and text[left] == _VARIATION_SELECTOR:
        left -= 1
    while right < len(text) and text[right] == _VARIATION_SELECTOR:
        right += 1
    return left >= 0 and right < len(text) and _is_emoji(text[left]) and _is_emoji(text[right])


def _invisible(text: str) -> str | None:
    for index, char in enumerate(text):
        if char in _INVISIBLE and not (char == _ZWJ and _emoji_joiner(text, index)):
            return char
    return None


def scan_prompt(prompt: str) -> str:
    """Why ``prompt`` is refused (upstream's wording), or ``""`` when it may be scheduled."""
    hidden = _invisible(prompt)
    if hidden is not None:
        code = f"U+{ord(hidden):04X}"
        return f"Blocked: prompt contains invisible unicode {code} (possible injection)."
    text = _GITHUB_AUTH_CALL.sub("curl https://api.github.com/user", prompt)
    for name, pattern in _THREATS:
        if pattern.search(text):
            return (
                f"Blocked: prompt matches threat pattern '{name}'. Cron prompts must not "
                "contain injection or exfiltration payloads."
            )
    return ""
