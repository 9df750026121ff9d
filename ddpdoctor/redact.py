"""Secret redaction: applied to every fact before it leaves the process (JSON, store, report).

Two rules. A key whose name says it holds a secret (TOKEN, KEY, SECRET, PASSWORD, ...) loses its value,
wherever it appears in the facts. A value that looks like a credential (known token prefixes, JWTs,
a password inside a URL) is redacted in environment facts, where such values hide under bland names.
"""
from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"

_SECRET_NAME = re.compile(
    r"(TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE_?KEY|(^|_)KEY($|_)|APIKEY|ACCESSKEY|(^|_)AUTH($|_)|COOKIE)",
    re.IGNORECASE,
)
# Names that match the pattern above but hold no secret and are useful to compare across nodes.
_NOT_SECRET = {"NCCL_IB_PKEY", "KEY_SIZE", "MONKEYPATCH"}

_SECRET_VALUE = [
    re.compile(r"^(ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}$"),  # GitHub
    re.compile(r"^hf_[A-Za-z0-9]{20,}$"),  # Hugging Face
    re.compile(r"^(sk|rk|pk)[-_][A-Za-z0-9_-]{16,}$"),  # OpenAI / Stripe style
    re.compile(r"^(AKIA|ASIA)[A-Z0-9]{16}$"),  # AWS access key id
    re.compile(r"^xox[abprs]-[A-Za-z0-9-]{10,}$"),  # Slack
    re.compile(r"^eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}$"),  # JWT
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
]
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]+):(?P<pw>[^@/\s]+)@")
# A long run of base64/hex-ish characters mixing letters and digits, with no path or list separators.
_OPAQUE = re.compile(r"^[A-Za-z0-9+/=_-]{32,}$")


def is_secret_name(name: str) -> bool:
    return name.upper() not in _NOT_SECRET and bool(_SECRET_NAME.search(name))


def looks_like_secret(value: str) -> bool:
    if any(p.search(value) for p in _SECRET_VALUE):
        return True
    if _OPAQUE.match(value) and re.search(r"[0-9]", value) and re.search(r"[A-Za-z]", value):
        return not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", value)  # git / sha256 hashes are not secrets
    return False


def redact_value(value: str) -> str:
    if looks_like_secret(value):
        return REDACTED
    return _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", value)


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """Environment variables as safe to publish: secret names and secret-looking values redacted."""
    return {k: (REDACTED if is_secret_name(k) else redact_value(v)) for k, v in env.items()}


def scrub(obj: Any) -> Any:
    """Recursively redact values stored under secret-looking keys (the last line of defence)."""
    if isinstance(obj, dict):
        return {
            k: (REDACTED if isinstance(k, str) and is_secret_name(k) and isinstance(v, (str, int, float)) else scrub(v))
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [scrub(v) for v in obj]
    if isinstance(obj, str):
        return _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", obj)
    return obj
