"""The words run-trainer's and postmortem's views use for the run document's labels: categories, the hang
classes, exit states, paths as a person reads them (relative to the working directory). Decided on data,
worded here, last."""
from __future__ import annotations

import os
import re

CATEGORY = {
    "exception": "an exception", "peer_lost": "lost its peer",
    "signal": "ended by a signal", "timeout": "a collective timed out", "hang": "a hang",
    "desync": "the ranks called different collectives", "oom": "out of memory", "cuda": "a CUDA error",
    "nccl": "an NCCL error", "launcher_env": "not started by torchrun", "stopped": "stopped after another failure",
    "interrupted": "stopped on request", "connect": "the ranks could not connect to each other",
    "restart_connect": "the restarted ranks could not connect (torch's restart)",
    "consequence": "a consequence of another rank's failure", "unknown": "no cause in its records",
}
# The hang judge's classes (collectives.py, attribution.py): what the rank did, in words.
KIND = {
    "missing_rank": "never reached the collective the others wait in",
    "likely_missing_rank": "likely never reached the collective the others timed out in",
    "likely_ended_early": "likely ended before the collective the others waited in",
    "ended_early": "ended before the collective the others wait in",
    "likely_desync": "likely called another collective than the others",
    "desync_no_majority": "the ranks called different collectives (no majority)",
    "desync": "called another collective than the others",
    "stuck_collective": "every rank is inside the same collective and none completes",
    "stuck_init": "every rank is inside init_process_group and none completes it",
    "process_stopped": "its process is stopped", "process_gone": "its process ended unnoticed",
    "outside_collectives": "every rank is stuck in its own code", "unknown": "no rank's records answered",
    "Hang": "no rank made progress", "usage": "its command-line arguments were refused",
    "missing_peer": "the peer of a send or recv the others wait in never came",
    "never_initialized": "never reached init_process_group, where the others wait for it",
    "killed": "killed by a signal nobody in the job sent", "size_mismatch": "sent a message of another size",
    # the job's motion (judge/policy.py, judge/outcome.py)
    "progressing": "the job progresses", "computing": "no rank waits: the job computes",
    "waiting_on_busy": "ranks wait on a rank busy in its own code", "no_movement": "no rank moved",
    "no_job": "no job here", "normal_end": "ended normally",
}
LABELS = tuple(CATEGORY) + tuple(KIND)


def category(label: str | None) -> str:
    if not label:
        return "no category"
    if not isinstance(label, str):  # a hand-edited document: shown as it is, never a crash
        return str(label)
    return CATEGORY.get(label, label.replace("_", " "))


# A root cause the hang judge found in a rank that ended of its own while the others waited (sys.exit, a clean
# return): the run was judged as a hang, but this rank did not hang; the header says what it did.
ENDED = {"ended_early": "ended while the others waited", "likely_ended_early": "likely ended while the others waited"}


def root_category(root: dict) -> str:
    """The words for a root cause's category, as its header line says it."""
    if root.get("category") == "hang" and root.get("error_type") in ENDED:
        return ENDED[root["error_type"]]
    return category(root.get("category"))


def kind(error_type: str | None) -> str | None:
    """The words for a hang class; None for a real exception's type (shown as it is: ValueError)."""
    return KIND.get(error_type) if isinstance(error_type, str) else None


def exit_state(rc: dict, stopped_by_us: bool) -> str:
    """How the rank ended: an exit code, a signal, or (judged live) still running until ddpdoctor stopped it."""
    if rc.get("signal"):
        return f"ended by {rc['signal']}"
    code = rc.get("exit_code")
    if code is None:
        return "still running; stopped by ddpdoctor" if stopped_by_us else "no exit status in the records"
    return f"exit code {code}"


def path(text: str | None) -> str:
    """A path relative to the working directory when it lies under it (short: never broken in a panel)."""
    if not text:
        return ""
    try:
        rel = os.path.relpath(text)
    except ValueError:
        return text
    return rel if not rel.startswith("..") and len(rel) < len(text) else text


def location(where: str | None) -> str:
    """file:line with the file relative to the working directory."""
    if not where:
        return ""
    file, sep, line = where.rpartition(":")
    return f"{path(file)}:{line}" if sep and re.fullmatch(r"[0-9]+", line) and file else path(where)


ABSOLUTE = re.compile(r"(?<![\w./~-])/[\w.+@%-]+(?:/[\w.+@%-]+)+")


def paths_in(text: str) -> str:
    """Every absolute path in a sentence (a fix, a reason) in the one style the panel uses for `where:`: relative
    to the working directory when under it, else as it is."""
    if not isinstance(text, str) or "/" not in text:
        return text
    return ABSOLUTE.sub(lambda m: path(m.group()), text)


def labels_in(text: str) -> str:
    """A class label the judge's data carries, "(missing_rank)", in words: "(never reached the collective ...)"."""
    if not isinstance(text, str) or "(" not in text:
        return text
    return re.sub(r"\(([a-z]+(?:_[a-z]+)+)\)", lambda m: f"({KIND.get(m[1]) or CATEGORY.get(m[1]) or m[1].replace('_', ' ')})",
                  text)


def in_words(text: str) -> str:
    """A sentence from the document as the panel shows it: one path style, no internal label."""
    return labels_in(paths_in(text))


# The terms a newcomer meets in a failure panel, each explained once under it (terms_line): the pattern that
# finds the term in the panel's text, and the explanation (a function of the match).
TERMS = (
    (re.compile(r"#(\d+) \(process group (\d+)\)"),
     lambda m: f"#{m[1]} (process group {m[2]}) = the {_ordinal(m[1])} collective the ranks started on process group "
               f"{m[2]}" + (" (torch's default group: every rank)" if m[2] == "0" else " (a group the job created)")),
    (re.compile(r"last sequence ids"),
     lambda m: "sequence id = how many collectives a rank had started on that group (a rank behind the others "
               "never started the last one)"),
    (re.compile(r"flight recorders?"),
     lambda m: "flight recorder = torch's record of each rank's last collectives (which call, started or done)"),
)


def _ordinal(number: str) -> str:
    n = int(number)
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def terms_line(texts: list[str]) -> str | None:
    """'terms: X = ...; Y = ...' for the terms the panel's lines use (each once, in the order met), else None."""
    said: list[str] = []
    for pattern, explain in TERMS:
        for text in texts:
            m = pattern.search(text or "")
            if m:
                said.append(explain(m))
                break
    return "terms: " + "; ".join(said) if said else None
