"""Secrets recognised by their shape in free text, whatever name stands before them: service tokens
(``sk-proj-…``, ``ghp_…``, ``hf_…``, ``xoxb-…``, AWS key ids, Google API keys, JWTs; also inside a name, as in a
function or file name ``load_ghp_…_weights``), ``Bearer …``, a URL's
password, webhook URLs whose path is the credential (Slack, Discord, Teams, Telegram), netrc's
``password X`` and ``mysql -pX``. Every pattern starts with a literal, is bounded and checks a word boundary
by a fixed-width look-behind after that literal, so a scan is linear in the text's length."""
from __future__ import annotations

import re
from functools import cache


def _shape(prefix: str, rest: str) -> str:
    """A token shape that starts a word: PREFIX (not preceded by a word character) then REST."""
    return rf"{re.escape(prefix)}(?<![A-Za-z0-9_-]{re.escape(prefix)}){rest}(?![A-Za-z0-9_])"


def _glued(prefix: str, extra: str, count: str) -> str:
    """The same token inside an identifier (a function, file or variable name: ``load_ghp_…``, ``ghp_…_fn``):
    an underscore may stand on either side. Its characters are letters, digits and ``extra``, ``count`` of them,
    and both letters and digits among them, as a random token has (so a long word after ``hf_`` stays)."""
    return (rf"{re.escape(prefix)}(?<![A-Za-z0-9-]{re.escape(prefix)})"
            rf"(?=[A-Za-z{extra}]{{0,254}}[0-9])(?=[0-9{extra}]{{0,254}}[A-Za-z])[A-Za-z0-9{extra}]{count}"
            r"(?![A-Za-z0-9])")


_DIGIT_AND_LETTER = r"(?=[A-Za-z_-]{0,254}[0-9])(?=[0-9_-]{0,254}[A-Za-z])"
# Inside a name, only the prefixes no ordinary identifier starts a 16+ character run with (not sk_/pk_/rk_:
# `sk_learn_model_v2` is scikit-learn's, not Stripe's).
_GLUED = ([_glued(p, "", "{20,255}") for p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "hf_")]
          + [_glued("github_pat_", "_", "{20,255}"), _glued("glpat-", "-", "{20,255}")]
          + [_glued(f"xox{c}-", "-", "{10,255}") for c in "abprs"]
          + [_glued("AIza", "-", "{35}"), _glued("npm_", "", "{36}"), _glued("pypi-", "-", "{50,255}")]
          + [_glued(p, "", "{16}") for p in ("AKIA", "ASIA")])
_TOKEN_SHAPE_SOURCE = "|".join(
    _GLUED + [_shape(p, "[A-Za-z0-9]{20,255}") for p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "hf_")]  # GitHub, HF
    + [_shape("github_pat_", "[A-Za-z0-9_]{20,255}"), _shape("glpat-", "[A-Za-z0-9_-]{20,255}")]  # GitLab
    + [_shape(p, _DIGIT_AND_LETTER + "[A-Za-z0-9_-]{16,255}")  # OpenAI sk-proj-/sk-live-, Stripe sk_live_
       for p in ("sk-", "sk_", "rk-", "rk_", "pk-", "pk_")]
    + [_shape(p, "[A-Z0-9]{16}") for p in ("AKIA", "ASIA")]  # AWS access key ids
    + [_shape(f"xox{c}-", "[A-Za-z0-9-]{10,255}") for c in "abprs"]  # Slack
    + [_shape("AIza", "[0-9A-Za-z_-]{35}")]  # Google API keys (Gemini, Maps, Firebase)
    + [_shape("pypi-", "[A-Za-z0-9_-]{50,255}"), _shape("npm_", "[A-Za-z0-9]{36}")]  # package registries
    + [_shape("eyJ", r"[A-Za-z0-9_-]{8,2048}\.[A-Za-z0-9_-]{8,2048}\.[A-Za-z0-9_-]{8,2048}")]  # JWT
)


@cache
def _token_shape() -> re.Pattern:
    """Compiled at its first use: about 10 ms of CPU (20 on a busy machine) that every process paid at import,
    a single-node preflight among them, which never scans free text (issue 41)."""
    return re.compile(_TOKEN_SHAPE_SOURCE)


_SHAPE_PREFIXES = ("gh", "hf_", "glpat-", "sk", "rk", "pk", "AKIA", "ASIA", "xox", "AIza", "pypi-", "npm_", "eyJ")
_BEARER = re.compile(r"Bearer(?<![A-Za-z0-9_]Bearer)[ \t]{1,4}(?P<v>[A-Za-z0-9._~+/=-]{8,4096})")
_URL_PW = re.compile(r"://[^:/@\s]{1,256}:(?P<v>[^@/\s]{1,1024})@")  # scheme://user:PASSWORD@host
# Webhook URLs whose path is the credential: Slack, Discord, Microsoft Teams, Telegram bots.
WEBHOOK_HOSTS = ("hooks.slack.com", "discord.com", "discordapp.com", "webhook.office.com", "api.telegram.org")
WEBHOOK = re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<v>[A-Za-z0-9/_-]{8,512})"
                     r"|discord(?:app)?\.com/api/webhooks/(?P<d>[0-9]{1,30}/[A-Za-z0-9_-]{8,512})"
                     r"|webhook\.office\.com/webhookb2/(?P<o>[^\s\"'<>]{8,1024})"
                     r"|api\.telegram\.org/bot(?P<t>[0-9]{3,15}:[A-Za-z0-9_-]{20,200})")
# netrc's `machine h login u password X` (one line, or `password X` alone on its line): the pattern starts
# with its literal; what stands before it on the line is checked in `_netrc`.
_NETRC = re.compile(r"password(?<![A-Za-z0-9_-]password)[ \t]{1,8}(?P<v>[^\s]{1,1024})"
                    r"(?=[ \t]{0,8}\r?$|[ \t]{1,8}(?:machine|login|account|macdef|default)\b)", re.M)
_MYSQL = re.compile(r"(?:mysql|mysqldump|mysqladmin|mariadb)(?![A-Za-z0-9_])")
_MYSQL_PW = re.compile(r"(?<![A-Za-z0-9_-])-p(?P<v>[^\s'\"-][^\s'\"]{0,1023})")


def shape_spans(text: str, spans: list, budget: list) -> None:
    """Append the span of every shaped secret in ``text``; ``budget[0]`` counts down the values found (at
    zero, the rest of the text is one span: a text of a million tokens attacks the redactor's time)."""
    for pattern, group, needles in ((_token_shape, 0, _SHAPE_PREFIXES), (_BEARER, "v", ("Bearer",)),
                                    (_URL_PW, "v", ("://",)), (WEBHOOK, None, WEBHOOK_HOSTS),
                                    (_NETRC, "v", ("password",))):
        if not any(n in text for n in needles):
            continue
        if pattern is _token_shape:
            pattern = _token_shape()
        for m in pattern.finditer(text):
            if pattern is _NETRC and not _netrc(text, m):
                continue
            spans.append(m.span(group if group is not None else m.lastgroup))
            budget[0] -= 1
            if budget[0] <= 0:
                spans.append((m.end(), len(text)))
                return
    if "-p" in text:
        _mysql_passwords(text, spans, budget)


def _netrc(text: str, m: re.Match) -> bool:
    """`password X` is netrc's when nothing but blanks stands before it on its line, or `login USER`."""
    nl = text.rfind("\n", max(0, m.start() - 1024), m.start())
    if nl < 0 and m.start() > 1024:
        return False  # a line longer than that before the word: not a netrc line
    before = text[nl + 1:m.start()].split()
    return not before or (len(before) >= 2 and before[-2] == "login")


def _mysql_passwords(text: str, spans: list, budget: list) -> None:
    """`mysql -uroot -pS3cret`: the -p value on a line that runs a MySQL client."""
    for m in _MYSQL.finditer(text):
        budget[0] -= 1
        if budget[0] <= 0:
            return
        end = text.find("\n", m.end())
        spans += [p.span("v") for p in _MYSQL_PW.finditer(text, m.end(), len(text) if end < 0 else end)]
