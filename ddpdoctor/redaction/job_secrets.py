"""The job's own secrets: the values held by its environment's secret-named variables and by its
secret-looking arguments, which ``redact.redact_text`` scrubs as literal strings from any text that leaves.

A rank's error that quotes ``$DB_PASSWORD`` carries no name and no token shape: only the value tells, and
run-trainer knows it, since it passes its environment to the job. ``redact.know_job`` records the values
(run-trainer when it launches the job, the bootstrap in each rank before it writes error.json); a process
that never calls it takes its own environment at its first redaction.

Not every value of a secret-named variable is worth scrubbing. SSH_AUTH_SOCK holds a path,
GOOGLE_APPLICATION_CREDENTIALS a file name, a FOO_TOKEN_ENABLED "1" or "true", PIP_KEYRING_PROVIDER
"subprocess": cutting those out of a log would blank file paths, numbers and words (every subprocess.py),
and a reader who sees ordinary text turned into <redacted> stops trusting the rest. A value is scrubbed when
it has at least MIN_CHARS (8) characters, or at least MIN_MIXED_CHARS (6) when it mixes letters with digits
or symbols ("hunter2"); never a path, a number or a word of COMMON, nor the value of a variable whose last
word names a setting (SETTING_WORDS: REDIS_AUTH_HOST, AUTH_TYPE, HF_TOKEN_PATH). Eight is the shortest
password NIST SP 800-63B lets a user choose, and every token format of a service is longer (20 to 40+
characters); below six, even a mixed value ("v1.2", "a100") is far more often ordinary text than a secret.
A shorter secret still goes where its name or its shape shows (``password: abc``, ``--token x``), by the
rules of ``redact``.
"""
from __future__ import annotations

import re
import threading
from typing import Iterable
from urllib.parse import quote

MIN_CHARS = 8
MIN_MIXED_CHARS = 6
MAX_VALUES = 256  # distinct values scrubbed, longest first: each costs one C-level scan of the text
MAX_VALUE_CHARS = 16384  # a private key held in a variable is ~3.3 KB; its lines are remembered one by one
COMMON = frozenset({
    "true", "false", "none", "null", "yes", "no", "on", "off", "enabled", "disabled", "enable", "disable",
    "default", "localhost", "unknown", "unset", "undefined", "changeme", "password", "secret", "token",
    "required", "optional", "anonymous", "username", "example", "placeholder",
})
_NUMBER = re.compile(r"[-+]?[0-9][0-9_.,:eE+-]*")
_PATH = re.compile(r"(?:~|\.{1,2})?/[^\s]*")

# A secret-named variable whose last word says it holds a setting, not the secret: PIP_KEYRING_PROVIDER=
# subprocess, REDIS_AUTH_HOST=db1, AUTH_TYPE=kerberos, HF_TOKEN_PATH=... (its value would be an ordinary word).
SETTING_WORDS = frozenset({
    "PROVIDER", "BACKEND", "TYPE", "METHOD", "MODE", "PATH", "FILE", "DIR", "HOST", "PORT", "USER", "USERNAME",
    "NAME", "ENABLED", "DISABLED", "ENABLE", "DISABLE", "SOCK", "SOCKET", "ENDPOINT", "REGION", "VERSION",
    "FORMAT", "TIMEOUT", "LEVEL", "SIZE", "COUNT", "ID", "DOMAIN", "SCOPE", "SCOPES", "ALGORITHM", "HEADER",
})
_lock = threading.Lock()
_values: tuple[str, ...] | None = None  # None: not told yet (redact.know_job takes the environment then)


def names_a_setting(name: str) -> bool:
    words = [w for w in re.split(r"[^A-Za-z0-9]+", name.upper()) if w]
    return bool(words) and words[-1] in SETTING_WORDS


def worth_scrubbing(value: str) -> bool:
    """A value long and particular enough that cutting it out of any text loses nothing ordinary."""
    if len(value) < MIN_MIXED_CHARS or len(value) > MAX_VALUE_CHARS or value.lower() in COMMON:
        return False
    if is_number_or_path(value):
        return False
    if len(value) >= MIN_CHARS:
        return True
    return any(c.isalpha() for c in value) and not value.isalpha()  # "hunter2", "p@ss!1"; not "secret", "123456"


def candidates(value: str) -> list[str]:
    """The forms of one secret value to scrub: the value, its lines (a PEM key in a variable) and its
    percent-encoded form (a password inside a URL), those worth scrubbing."""
    forms = [value.strip()]
    if "\n" in value:
        forms += [line.strip() for line in value.splitlines()]
    forms = [form for form in forms if worth_scrubbing(form)]
    forms += [quote(form, safe="") for form in forms[:1]]
    return list(dict.fromkeys(forms))


def remember(values: Iterable[str]) -> None:
    """The job's secret values, replacing what was remembered before (one job per process)."""
    global _values
    found: dict[str, None] = {}
    for value in values:
        if isinstance(value, str):
            for form in candidates(value):
                found[form] = None
    with _lock:
        _values = tuple(sorted(found, key=len, reverse=True)[:MAX_VALUES])


def known() -> tuple[str, ...] | None:
    return _values


def spans(text: str, values: Iterable[str]) -> list[tuple[int, int]]:
    """Where each value occurs in ``text`` (overlaps are merged by the caller)."""
    out: list[tuple[int, int]] = []
    for value in values:
        pos = text.find(value)
        while pos >= 0:
            out.append((pos, pos + len(value)))
            pos = text.find(value, pos + len(value))
    return out


def removed_parts(original: str, redacted: str, marker: str) -> list[str]:
    """What redaction cut out of ``original`` to give ``redacted`` (each ``marker`` stands for one part):
    the secret values of a redacted argument, to scrub from the text the job writes."""
    pieces = redacted.split(marker)
    if len(pieces) == 1:
        return []
    if not (original.startswith(pieces[0]) and original.endswith(pieces[-1])):
        return [original]
    out, pos = [], len(pieces[0])
    stop = len(original) - len(pieces[-1])
    for piece in pieces[1:-1]:
        end = original.find(piece, pos, stop) if piece else pos
        if end < 0:
            return [original]
        out.append(original[pos:end])
        pos = end + len(piece)
    out.append(original[pos:stop])
    return [part for part in out if part]


def is_number_or_path(value: str) -> bool:
    return bool(_NUMBER.fullmatch(value) or _PATH.fullmatch(value))


def forget() -> None:
    """Back to not told: the next redaction takes the process's environment again."""
    global _values
    with _lock:
        _values = None
