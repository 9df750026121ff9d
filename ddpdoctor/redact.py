"""Secret redaction: applied to every fact before it leaves the process (JSON, store, report) and to the
user's script arguments before they are stored.

Three rules. A name that says it holds a secret (TOKEN, KEY, SECRET, PASSWORD, ...) loses its value,
wherever it appears: an environment variable, a key in the facts, a ``--flag`` or ``--flag=`` in argv,
``name=value`` overrides. A value that looks like a credential (known token prefixes, JWTs, ``Bearer ...``,
long high-entropy strings) is redacted whatever its name. Inside any value, a password in a URL and the
value of a secret-named query parameter (``?token=``, ``&sig=``) are redacted, the rest kept.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any, Iterable

REDACTED = "<redacted>"

# Names are compared by segment (split on _ - . and the like), so MONKEYPATCH and TOKENIZERS_PARALLELISM
# keep their values while CUDA_CACHE_KEYFILE, WANDB_API_KEY and --api-key lose theirs.
_SEGMENT_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_SECRET_SEGMENT = re.compile(
    r"[A-Z0-9]*TOKEN"  # TOKEN, HFTOKEN, ACCESSTOKEN; not TOKENS_PER_S or TOKENIZERS
    r"|[A-Z0-9]*SECRETS?"
    r"|[A-Z0-9]*(PASSWORD|PASSWD|PASSPHRASE)S?"
    r"|[A-Z0-9]*CREDENTIALS?"
    r"|COOKIES?"
    r"|KEY(S|FILE|RING|TAB|ID|PAIR|STORE|CHAIN)?"
    r"|(API|ACCESS|PRIVATE|SECRET|SIGNING|ENCRYPTION|SSH|GPG|PGP|LICENSE|SESSION|CLIENT)KEYS?"
    r"|AUTH|AUTHORIZATION|BEARER"
)
# Names that match the rules above but hold no secret and are useful to compare across nodes.
_NOT_SECRET = {"NCCL_IB_PKEY", "KEY_SIZE", "MONKEYPATCH"}
# Query parameters that carry a credential without saying so by the rules above (Azure SAS, short forms).
_QUERY_SECRET = {"SIG", "SIGNATURE", "PWD", "PW", "PASS", "APIKEY"}

_SECRET_VALUE = [
    re.compile(r"^(ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}$"),  # GitHub
    re.compile(r"^hf_[A-Za-z0-9]{20,}$"),  # Hugging Face
    re.compile(r"^(sk|rk|pk)[-_][A-Za-z0-9_-]{16,}$"),  # OpenAI / Stripe style (sk-live-...)
    re.compile(r"^(AKIA|ASIA)[A-Z0-9]{16}$"),  # AWS access key id
    re.compile(r"^xox[abprs]-[A-Za-z0-9-]{10,}$"),  # Slack
    re.compile(r"^eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}$"),  # JWT
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
]
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]+):(?P<pw>[^@/\s]+)@")
# name=value at the start of a value or after ? & ; (a URL's query, or a bare "token=abc").
_QUERY_PARAM = re.compile(r"(?P<pre>(?:^|[?&;])(?P<name>[A-Za-z0-9_.-]+)=)(?P<val>[^&;#\s]+)")
_AUTH_SCHEME = re.compile(r"^(?P<scheme>Bearer|Basic|Token|Digest)\s+\S{8,}$", re.IGNORECASE)
# A long run of base64/hex-ish characters mixing letters and digits, with no path or list separators.
_OPAQUE = re.compile(r"^[A-Za-z0-9+/=_-]{32,}$")
_ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_+~][A-Za-z0-9_.+~-]*)=(?P<val>.*)$", re.DOTALL)


def is_secret_name(name: str) -> bool:
    segments = [seg for seg in _SEGMENT_SPLIT.split(name.upper()) if seg]
    if "_".join(segments) in _NOT_SECRET:  # key-size, KEY_SIZE and key.size alike
        return False
    return any(_SECRET_SEGMENT.fullmatch(seg) for seg in segments)


def looks_like_secret(value: str) -> bool:
    if any(p.search(value) for p in _SECRET_VALUE) or _AUTH_SCHEME.match(value):
        return True
    if _OPAQUE.match(value) and re.search(r"[0-9]", value) and re.search(r"[A-Za-z]", value):
        if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", value):
            return False  # git / sha256 hashes are not secrets
        return _entropy(value) >= 3.0  # random keys ~4-6 bits a character; "a1a1a1..." is not a secret
    return False


def _entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def redact_parts(value: str) -> str:
    """The secret parts inside a longer value: a URL's password, secret-named query parameters."""
    value = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", value)
    return _QUERY_PARAM.sub(_query_sub, value) if "=" in value else value


def _query_sub(m: re.Match) -> str:
    name = m["name"]
    if is_secret_name(name) or _QUERY_SECRET.intersection(_SEGMENT_SPLIT.split(name.upper())):  # X-Amz-Signature
        return m["pre"] + REDACTED
    return m[0]


def redact_value(value: str) -> str:
    if looks_like_secret(value):
        auth = _AUTH_SCHEME.match(value)
        return f"{auth['scheme']} {REDACTED}" if auth else REDACTED
    return redact_parts(value)


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """Environment variables as safe to publish: secret names and secret-looking values redacted."""
    return {k: (REDACTED if is_secret_name(k) else redact_value(v)) for k, v in env.items()}


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A command line as safe to store: ``--api-key X``, ``--token=X``, ``api_key=X`` lose X, and any
    argument that looks like a credential is redacted. Only for what is stored or shown: the process
    itself gets the real arguments."""
    out: list[str] = []
    hide_next = False
    options_done = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif options_done:  # after "--" everything is positional, but a credential still looks like one
            out.append(_redact_assignment(arg))
        elif arg == "--":
            options_done = True
            out.append(arg)
        elif _is_flag(arg):
            flag, eq, val = arg.partition("=")
            if is_secret_name(flag.lstrip("-")):
                out.append(f"{flag}={REDACTED}" if eq else flag)
                hide_next = not eq  # "--password hunter2": the value is the next argument
            else:
                out.append(f"{flag}={redact_value(val)}" if eq else arg)
        else:
            out.append(_redact_assignment(arg))
    return out


def _is_flag(arg: str) -> bool:
    """-x, --name, -name: a flag; "-5" and "-" are values."""
    return arg.startswith("-") and len(arg) > 1 and not re.fullmatch(r"-[0-9.]+(e[0-9]+)?", arg)


def _redact_assignment(arg: str) -> str:
    """Hydra/OmegaConf-style NAME=VALUE overrides (wandb.api_key=...), else the value rules."""
    m = _ASSIGNMENT.match(arg)
    if m and is_secret_name(m["name"]):
        return f"{m['name']}={REDACTED}"
    return redact_value(arg)


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
        return redact_parts(obj)
    return obj
