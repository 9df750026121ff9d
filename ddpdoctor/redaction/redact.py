"""Secret redaction: applied to every fact before it leaves the process (JSON, store, report), to the
user's script arguments before they are stored, and to every text another process wrote before it leaves.

Three rules. A name that says it holds a secret (TOKEN, KEY, SECRET, PASSWORD, ...) loses its value,
wherever it appears: an environment variable, a key in the facts, a ``--flag`` or ``--flag=`` in argv,
``name=value`` overrides. A value that looks like a credential (known token prefixes, JWTs, ``Bearer ...``,
long high-entropy strings) is redacted whatever its name. Inside any value, a password in a URL, the
value of a secret-named query parameter (``?token=``, ``&sig=``) and a webhook URL's token path are
redacted, the rest kept. In argv also ``-k X``, ``-p X`` and ``-pX`` (mysql) when X could be a password
(6+ characters of two kinds: ``-p 8080``, ``-k 5``, ``-pretrained`` stay), and the token segments of a
webhook flag's URL (``--notify=https://…/T0/B0/XXXX``).

Free text another process wrote (log tails, exception messages, tracebacks, stacks: ``redact_text``, and
``redact_evidence`` over a whole document) gets the same rules inside the text: ``--password x``,
``--api-key=x``, ``['--token', 'x']``, ``password: x``, ``"api_key": "x"``, ``?token=x``, Azure's
``AccountKey=x`` lose the value, except a path (``keys: /default_pg/0//cpu//0/2``: torch's store keys
name the missing rank); token shapes are redacted wherever they stand (``shapes``: service tokens,
``Bearer …``, URL passwords, Slack/Discord/Teams/Telegram webhook paths, netrc ``password X``,
``mysql -pX``), and so are multi-line blocks (``blocks``: PEM and PGP private keys, also when the
tail cut their BEGIN line; a YAML value on the line after ``password:``; a JWT split at its dots). On top,
the job's own secrets (``job_secrets``, ``know_job``): the values of its environment's secret-named
variables and of its secret arguments, wherever they occur, when long enough not to be ordinary text.
``Lines`` does the same for a stream read line by line. Every pattern is linear in the text's length
(bounded quantifiers, scanning resumes after each redacted value): a 10 MB line costs well under a second.
Not the high-entropy rule: in free text it would take GPU UUIDs, hashes and run ids too.

Why not the ``detect-secrets`` package (evaluated, 1.5.0, ``tests/benchmarks/bench_redact.py``, default
plugins and filters as ``detect-secrets scan`` runs them): on a 1 MB training log with 8 planted secrets it
took 8.1 s of CPU (these rules: 0.11 s; a 40-line tail 45 ms vs 0.5 ms) and caught 3 of 8, missing
``--password x``, ``hf_…``, ``sk-proj-…`` and the environment's values, which it cannot know; it missed a
PEM body whose BEGIN line was cut, ``password:`` with the value on the next line, netrc, ``mysql -pX`` and a
split JWT. It raised no false alarm on that log's tracebacks, paths, git SHAs and sha256 fingerprints, but
it reports a GitHub token's value as ``ghp`` (a regex group), so it cannot say what to cut out, and it pulls
in requests and PyYAML. Its rules would be a subset of these, at 70 times the cost.
"""
from __future__ import annotations

import math
import os
import re
from collections import Counter
from typing import Any, Iterable, Mapping

from . import job_secrets, shapes
from .blocks import LineState, block_spans
from .names import REDACTED, is_query_secret, is_secret_name  # noqa: F401 - public here too

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
_SHORT_SECRET_FLAGS = ("-k", "-p")
_HOOK_FLAG = re.compile(r"notif|hook|callback|alert|slack|discord|teams", re.I)
# A path segment of a URL that is a token: 16+ characters mixing letters and digits (a webhook's secret).
_URL_PATH_TOKEN = re.compile(r"(?<=/)(?=[A-Za-z_-]{0,255}[0-9])(?=[0-9_-]{0,255}[A-Za-z])[A-Za-z0-9_-]{16,256}"
                             r"(?=[/?#]|$)")


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
    if "/" in value and any(host in value for host in shapes.WEBHOOK_HOSTS):
        value = shapes.WEBHOOK.sub(lambda m: m[0][:m.start(m.lastgroup) - m.start()] + REDACTED, value)
    return _QUERY_PARAM.sub(_query_sub, value) if "=" in value else value


def _query_sub(m: re.Match) -> str:
    name = m["name"]
    if is_secret_name(name) or is_query_secret(name):  # X-Amz-Signature
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
    hide_next = ""  # "any": the value of --password; "short": of -k or -p, when it could be a password
    options_done = False
    for arg in argv:
        if hide_next == "any" or (hide_next == "short" and _could_be_password(arg)):
            out.append(REDACTED)
            hide_next = ""
            continue
        hide_next = ""
        if options_done:  # after "--" everything is positional, but a credential still looks like one
            out.append(_redact_assignment(arg))
        elif arg == "--":
            options_done = True
            out.append(arg)
        elif arg in _SHORT_SECRET_FLAGS:  # `-k KEY`, `-p PASSWORD` (mysql, many CLIs); `-k 5`, `-p 8080` kept
            out.append(arg)
            hide_next = "short"
        elif arg[:2] in _SHORT_SECRET_FLAGS and _could_be_password(arg[2:]) and not arg[2:].isalpha():
            out.append(arg[:2] + REDACTED)  # mysql -pS3cret; not -pretrained
        elif _is_flag(arg):
            flag, eq, val = arg.partition("=")
            if is_secret_name(flag.lstrip("-")):
                out.append(f"{flag}={REDACTED}" if eq else flag)
                hide_next = "" if eq else "any"  # "--password hunter2": the value is the next argument
            else:
                out.append(f"{flag}={_flag_value(flag, val)}" if eq else arg)
        else:
            out.append(_redact_assignment(arg))
    return out


def _could_be_password(value: str) -> bool:
    """The value of -k or -p as a secret: six characters or more, two of letters, digits and symbols; not a
    number (a port, a count), a path or the next flag."""
    classes = (any(c.isalpha() for c in value), any(c.isdigit() for c in value),
               any(not c.isalnum() for c in value))
    return (len(value) >= 6 and not value.startswith("-") and sum(classes) >= 2
            and not job_secrets.is_number_or_path(value))


def _flag_value(flag: str, value: str) -> str:
    """A flag's value by the value rules; a webhook flag's URL (--notify=, --slack-hook=) also loses the
    opaque segments of its path, where such services put the token."""
    value = redact_value(value)
    if _HOOK_FLAG.search(flag) and "://" in value:
        value = _URL_PATH_TOKEN.sub(REDACTED, value)
    return value


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


_VALUE = re.compile(r"[^\s\"'&;#,)\]}]{1,4096}")
_AUTH_WORD = re.compile(r"(?i:Bearer|Basic|Token|Digest|Negotiate)[ \t]{1,4}")
# A path after a secret-looking name is a place, not a secret: `keys: /default_pg/0//cpu//0/2` (torch's
# store keys name the missing rank), `--key-file ./id_rsa`.
_PATH_VALUE = re.compile(r"(?:~|\.{1,2})?/[^\s/]")
# A source file's name (`secrets.py`, `token_utils.cc`) before `:LINE` in a traceback or a verdict's "where".
_SOURCE_FILE = re.compile(r"\.(?:py|pyx|pyi|c|cc|cpp|cxx|cu|cuh|h|hpp|sh|js|ts|go|rs|java)$", re.I)
_LINE_NUMBER = re.compile(r"\d{1,9}(?![^\s\"'&;#,)\]}])")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def know_job(env: Mapping[str, str] | None = None, argv: Iterable[str] = ()) -> None:
    """The job's secrets, scrubbed from every text ``redact_text`` sees from now on: the values of ``env``'s
    secret-named variables (this process's environment when None), the secret parts of its other values
    (a URL's password) and of ``argv`` (what ``redact_argv`` cuts out). See ``job_secrets``."""
    env = os.environ if env is None else env
    values: list[str] = []
    for name, value in env.items():
        secret = is_secret_name(name) and not job_secrets.names_a_setting(name)
        values += [value] if secret else job_secrets.removed_parts(value, redact_parts(value), REDACTED)
    argv = [arg for arg in argv if isinstance(arg, str)]
    for original, shown in zip(argv, redact_argv(argv)):
        values += job_secrets.removed_parts(original, shown, REDACTED)
    job_secrets.remember(values)


class Lines:
    """``redact_text`` for a stream read line by line (torchrun's output on the terminal, agent.stderr.log),
    with the multi-line context a single line lacks: a key's body after its BEGIN line, a YAML value under
    ``password:``, the parts of a split JWT (``blocks.LineState``). One per stream."""

    def __init__(self) -> None:
        self._state = LineState()

    def __call__(self, line: str) -> str:
        return _redact(line, self._state.spans(line)) if line else line


def redact_text(text: str) -> str:
    """Secrets inside free text, by name, by shape, by the job's known values and as multi-line blocks,
    replaced with <redacted>; the rest kept as written."""
    if not text or not isinstance(text, str):
        return text
    return _redact(text, block_spans(text))


def _redact(text: str, spans: list[tuple[int, int]]) -> str:
    values = job_secrets.known()
    if values is None:
        know_job()
        values = job_secrets.known() or ()
    spans += job_secrets.spans(text, values)
    budget = [MAX_FIELDS]
    _named_values(text, spans, budget)
    shapes.shape_spans(text, spans, budget)
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
        if span and _PATH_VALUE.match(text, span[0]):
            pos = max(pos, span[1])
            continue  # a path (a key file, torch's store keys), not a secret
        if span:
            spans.append(span)
            pos = max(pos, span[1])


def _secret_in_text(name: str, text: str, start: int, flag: bool) -> bool:
    if is_secret_name(name):
        return True
    # A query parameter that signs without saying so by name: ?sig=, &X-Amz-Signature=, &pwd=
    return not flag and start > 0 and text[start - 1] in "?&;" and is_query_secret(name)


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


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    """Each span replaced with one <redacted>; overlapping or touching spans are one."""
    out, last = [], 0
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if end <= last:
            continue
        if start <= last and out:  # overlaps the span just cut: extend it
            last = end
            continue
        out.append(text[last:start])
        out.append(REDACTED)
        last = end
    out.append(text[last:])
    return "".join(out)


def redact_evidence(obj: Any, _depth: int = 0, _memo: dict | None = None) -> Any:
    """A document's free text redacted (``redact_text`` on every string) and secret-named keys emptied:
    applied where a document is made, so run.json, the terminal and the HTML all get the redacted text. One
    pass over each distinct text: a rank's traceback stands in the root cause, its attempt and the consequences
    alike (``_memo``, for this document only: the job's secrets may change between documents)."""
    memo = {} if _memo is None else _memo
    if _depth > 200:
        return obj
    if isinstance(obj, dict):
        return {k: (REDACTED if isinstance(k, str) and is_secret_name(k) and isinstance(v, (str, int, float))
                    and not isinstance(v, bool) else redact_evidence(v, _depth + 1, memo)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_evidence(v, _depth + 1, memo) for v in obj]
    if isinstance(obj, str):
        if len(obj) < 16:  # a rank, a category, a host: cheaper to redact than to remember
            return redact_text(obj)
        done = memo.get(obj)
        if done is None:
            done = memo[obj] = redact_text(obj)
        return done
    return obj
