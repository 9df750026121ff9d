"""Secret redaction: applied to every fact before it leaves the process (JSON, store, report) and to the
user's script arguments before they are stored.

Three rules. A name that says it holds a secret (TOKEN, KEY, SECRET, PASSWORD, ...) loses its value,
wherever it appears: an environment variable, a key in the facts, a ``--flag`` or ``--flag=`` in argv,
``name=value`` overrides. A value that looks like a credential (known token prefixes, JWTs, ``Bearer ...``,
long high-entropy strings) is redacted whatever its name. Inside any value, a password in a URL and the
value of a secret-named query parameter (``?token=``, ``&sig=``) are redacted, the rest kept.

Free text another process wrote (log tails, exception messages, tracebacks, stacks: ``redact_text``, and
``redact_evidence`` over a whole document) gets the same rules inside the text: ``--password x``,
``--api-key=x``, ``['--token', 'x']``, ``password: x``, ``"api_key": "x"``, ``?token=x`` lose the value;
token shapes (``sk-proj-…``, ``sk-live-…``, AWS key ids, GitHub/GitLab/Hugging Face/Slack/PyPI tokens,
Google API keys, JWTs, ``Bearer …``, private-key blocks, URL passwords) are redacted wherever they stand.
Every pattern is linear in the text's length (bounded quantifiers, scanning resumes after each redacted
value): a 10 MB line costs well under a second. Not the high-entropy rule: in free text it would take GPU
UUIDs, hashes and run ids too.

Why not the ``detect-secrets`` package (evaluated, 1.5.0): it pulls in requests and PyYAML; its entropy
plugins flag every line of an ordinary training log (loss values, checkpoint hashes, paths: 12,000 of
12,000 lines of a 1.8 MB log, 17.6 s), and with only its pattern plugins it still takes 4.6 s for that
log, misses ``--password hunter2``, ``sk-proj-…``, ``sk-live-…``, ``hf_…``, ``Bearer …`` and ``?token=``,
and reports a GitHub token's value as ``ghp`` (a regex group), so it cannot say what to cut out.
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
    re.compile(r"^AIza[0-9A-Za-z_-]{35}$"),  # Google API key
    re.compile(r"^eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}$"),  # JWT
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
]
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]{0,31}://)(?P<user>[^:/@\s]+):(?P<pw>[^@/\s]+)@")
# name=value at the start of a value or after ? & ; (a URL's query, or a bare "token=abc").
_QUERY_PARAM = re.compile(r"(?P<pre>(?:^|[?&;])(?P<name>[A-Za-z0-9_.-]+)=)(?P<val>[^&;#\s]+)")
_AUTH_SCHEME = re.compile(r"^(?P<scheme>Bearer|Basic|Token|Digest)\s+\S{8,}$", re.IGNORECASE)
# A long run of base64/hex-ish characters mixing letters and digits, with no path or list separators.
_OPAQUE = re.compile(r"^[A-Za-z0-9+/=_-]{32,}$")
_ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_+~][A-Za-z0-9_.+~-]*)=(?P<val>.*)$", re.DOTALL)


# A tokenizer's vocabulary, not a credential: pad_token, eos_token_id, token_type_ids, TOKEN_COUNT.
_VOCAB_BEFORE = {"PAD", "EOS", "BOS", "UNK", "SEP", "CLS", "MASK", "SPECIAL", "ADDITIONAL", "START", "END",
                 "DECODER", "IMAGE", "AUDIO", "VIDEO"}
_VOCAB_AFTER = {"ID", "IDS", "TYPE", "TYPES", "COUNT", "LEN", "LENGTH", "SIZE", "INDEX", "NUM"}


def is_secret_name(name: str) -> bool:
    segments = [seg for seg in _SEGMENT_SPLIT.split(name.upper()) if seg]
    if "_".join(segments) in _NOT_SECRET:  # key-size, KEY_SIZE and key.size alike
        return False
    return any(_SECRET_SEGMENT.fullmatch(seg) and not _vocabulary(segments, i) for i, seg in enumerate(segments))


def _vocabulary(segments: list[str], i: int) -> bool:
    """TOKEN as a tokenizer's word: eos_token, pad_token_id, token_type_ids (not HF_TOKEN, not TOKEN)."""
    if segments[i] != "TOKEN":
        return False
    return (i > 0 and segments[i - 1] in _VOCAB_BEFORE) or (i + 1 < len(segments) and segments[i + 1] in _VOCAB_AFTER)


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


# ---------------------------------------------------------------- free text (logs, messages, tracebacks)
# Linear and fast on any input: every pattern starts with a literal (sre then skips ahead in C), every
# quantifier is bounded, a word boundary is checked by a fixed-width look-behind placed after the literal,
# and the scan resumes after each value it cut. Python runs only where a secret-ish word meets a separator,
# at most MAX_FIELDS times per text; past that the rest of the text is redacted whole (a line of a million
# `token: x` is an attack on the redactor's time, not something to show).
MAX_FIELDS = 2000
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_SEPARATORS = (r"(?P<sep>[\"']?[ \t]{0,4}[:=][ \t]{0,4}[\"']?"  # name=x, name: x, "name": "x", name = x
               r"|[\"']?,?[ \t]{1,8}[\"']?|[\"'],[\"'])")  # --flag x, ['--flag', 'x'], ["--flag","x"]
# On the lower-cased text: a word that can be part of a secret name (is_secret_name decides), the rest of
# the name, a separator.
# `(?=(?P<rest>...))(?P=rest)` is an atomic group (Python < 3.11 has no possessive quantifier): the name's
# rest is never backtracked into, so a long word costs one scan of at most 40 characters per keyword in it.
_KEYWORDS = ("token", "secret", "pass", "pw", "credential", "cookie", "key", "auth", "bearer", "sig")
_KEYWORD = re.compile(r"(?:token|secret|pass|pw|credential|cookie|key|auth|bearer|sig)"
                      r"(?=(?P<rest>[a-z0-9_.-]{0,40}))(?P=rest)" + _SEPARATORS)


def _shape(prefix: str, rest: str) -> str:
    """A token shape that starts a word: PREFIX (not preceded by a word character) then REST."""
    return rf"{re.escape(prefix)}(?<![A-Za-z0-9_-]{re.escape(prefix)}){rest}(?![A-Za-z0-9_])"


_DIGIT_AND_LETTER = r"(?=[A-Za-z_-]{0,254}[0-9])(?=[0-9_-]{0,254}[A-Za-z])"
_TOKEN_SHAPE = re.compile("|".join(
    [_shape(p, "[A-Za-z0-9]{20,255}") for p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "hf_")]  # GitHub, HF
    + [_shape("github_pat_", "[A-Za-z0-9_]{20,255}"), _shape("glpat-", "[A-Za-z0-9_-]{20,255}")]  # GitLab
    + [_shape(p, _DIGIT_AND_LETTER + "[A-Za-z0-9_-]{16,255}")  # OpenAI sk-proj-/sk-live-, Stripe sk_live_
       for p in ("sk-", "sk_", "rk-", "rk_", "pk-", "pk_")]
    + [_shape(p, "[A-Z0-9]{16}") for p in ("AKIA", "ASIA")]  # AWS access key ids
    + [_shape(f"xox{c}-", "[A-Za-z0-9-]{10,255}") for c in "abprs"]  # Slack
    + [_shape("AIza", "[0-9A-Za-z_-]{35}")]  # Google API keys (Gemini, Maps, Firebase)
    + [_shape("pypi-", "[A-Za-z0-9_-]{50,255}"), _shape("npm_", "[A-Za-z0-9]{36}")]  # package registries
    + [_shape("eyJ", r"[A-Za-z0-9_-]{8,2048}\.[A-Za-z0-9_-]{8,2048}\.[A-Za-z0-9_-]{8,2048}")]  # JWT
))
_SHAPE_PREFIXES = ("gh", "hf_", "glpat-", "sk", "rk", "pk", "AKIA", "ASIA", "xox", "AIza", "pypi-", "npm_", "eyJ")
_BEARER = re.compile(r"Bearer(?<![A-Za-z0-9_]Bearer)[ \t]{1,4}(?P<v>[A-Za-z0-9._~+/=-]{8,4096})")
_URL_PW = re.compile(r"://[^:/@\s]{1,256}:(?P<v>[^@/\s]{1,1024})@")  # scheme://user:PASSWORD@host
_VALUE = re.compile(r"[^\s\"'&;#,)\]}]{1,4096}")
_AUTH_WORD = re.compile(r"(?i:Bearer|Basic|Token|Digest|Negotiate)[ \t]{1,4}")
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----")
MAX_PEM_BYTES = 16384  # a 4096-bit RSA key in PEM is ~3.3 KB
# A source file's name (`secrets.py`, `token_utils.cc`) before `:LINE` in a traceback or a verdict's "where".
_SOURCE_FILE = re.compile(r"\.(?:py|pyx|pyi|c|cc|cpp|cxx|cu|cuh|h|hpp|sh|js|ts|go|rs|java)$", re.I)
_LINE_NUMBER = re.compile(r"\d{1,9}(?![^\s\"'&;#,)\]}])")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def redact_text(text: str) -> str:
    """Secrets inside free text, by name and by shape, replaced with <redacted>; the rest kept as written."""
    if not text or not isinstance(text, str):
        return text
    spans: list[tuple[int, int]] = []
    budget = [MAX_FIELDS]
    _named_values(text, spans, budget)
    for pattern, group, needles in ((_TOKEN_SHAPE, 0, _SHAPE_PREFIXES), (_BEARER, "v", ("Bearer",)),
                                    (_URL_PW, "v", ("://",))):
        if not any(n in text for n in needles):
            continue
        for m in pattern.finditer(text):
            spans.append(m.span(group))
            budget[0] -= 1
            if budget[0] <= 0:
                spans.append((m.end(), len(text)))
                break
    if "PRIVATE KEY-----" in text:
        _pem_blocks(text, spans)
    return _cut(text, spans) if spans else text


def _named_values(text: str, spans: list, budget: list) -> None:
    """The value after each secret name (a flag, or name plus = or :); the scan resumes after that value."""
    low = text.lower()
    if not any(word in low for word in _KEYWORDS):  # the usual case, found by C substring searches
        return
    if len(low) != len(text):  # a few non-ASCII letters lower-case to two characters: keep offsets equal
        low = text.translate(_ASCII_LOWER)
    pos = 0
    while True:
        m = _KEYWORD.search(low, pos)
        if m is None:
            return
        budget[0] -= 1
        if budget[0] <= 0:
            spans.append((m.start(), len(text)))
            return
        pos = m.end()
        start = m.start()
        while start > 0 and m.start() - start < 64 and text[start - 1] in _NAME_CHARS:
            start -= 1
        if start > 0 and text[start - 1] in _NAME_CHARS:
            continue  # a name longer than 64 characters: not one a secret hides behind
        head = m.start("sep")
        name = text[start:head]
        sep = m["sep"]
        flag = name.startswith("-")
        bare = name.lstrip("-")
        if not bare or not (bare[0].isalpha() or (bare[0] == "_" and not flag)):
            continue
        if not flag and ":" not in sep and "=" not in sep:
            continue  # `token count 5`: prose, not an assignment
        if not _secret_in_text(bare, text, start, flag):
            continue
        if flag and not sep.strip(" \t\"',") and text.startswith("-", pos):
            continue  # `--token --next`: a flag without a value
        if sep == ":" and _SOURCE_FILE.search(bare) and _LINE_NUMBER.match(text, pos):
            continue  # `secret_store.py:42`, `auth/token.py:7`: a file and line, not a name and its value
        span = _value_span(text, pos, sep[-1] if sep[-1:] in "\"'" else "")
        if span:
            spans.append(span)
            pos = max(pos, span[1])


def _secret_in_text(name: str, text: str, start: int, flag: bool) -> bool:
    if is_secret_name(name):
        return True
    # A query parameter that signs without saying so by name: ?sig=, &X-Amz-Signature=, &pwd=
    return not flag and start > 0 and text[start - 1] in "?&;" and bool(
        _QUERY_SECRET.intersection(_SEGMENT_SPLIT.split(name.upper())))


def _value_span(text: str, pos: int, quote: str) -> tuple[int, int] | None:
    if not quote and text[pos:pos + 1] in ("'", '"'):  # --password="a b"
        quote, pos = text[pos], pos + 1
    if quote:  # up to the closing quote on the same line
        end = text.find(quote, pos, pos + 4097)
        newline = text.find("\n", pos, end if end >= 0 else pos + 4097)
        if end < 0 or newline >= 0:
            v = _VALUE.match(text, pos)
            return v.span() if v else None
        return (pos, end) if end > pos else None
    auth = _AUTH_WORD.match(text, pos, pos + 16)
    if auth:  # Authorization: Basic x -> keep the scheme, cut its credential
        pos = auth.end()
    v = _VALUE.match(text, pos)
    return v.span() if v else None


def _pem_blocks(text: str, spans: list) -> None:
    """A private key's body, from its BEGIN line to its END line (or MAX_PEM_BYTES when it has none)."""
    pos = 0
    while True:
        m = _PEM_BEGIN.search(text, pos)
        if m is None:
            return
        end = text.find("-----END", m.end(), m.end() + MAX_PEM_BYTES)
        pos = end if end >= 0 else min(len(text), m.end() + MAX_PEM_BYTES)
        spans.append((m.end(), pos))


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    out, last = [], 0
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if end <= last:
            continue
        start = max(start, last)
        out.append(text[last:start])
        out.append(REDACTED)
        last = end
    out.append(text[last:])
    return "".join(out)


def redact_evidence(obj: Any, _depth: int = 0) -> Any:
    """A document's free text redacted (``redact_text`` on every string) and secret-named keys emptied:
    applied where a document is made, so run.json, the terminal and the HTML all get the redacted text."""
    if _depth > 200:
        return obj
    if isinstance(obj, dict):
        return {k: (REDACTED if isinstance(k, str) and is_secret_name(k) and isinstance(v, (str, int, float))
                    and not isinstance(v, bool) else redact_evidence(v, _depth + 1)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_evidence(v, _depth + 1) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj
