"""Secret redaction, one module per rule set: what callers use to redact before anything leaves the process.

``redact`` applies the rules (to facts, argv, the environment, free text and whole documents); ``names`` says
which names hold a secret and what a redacted value reads as; ``shapes`` finds secrets by their shape in
text; ``blocks`` finds the ones that span lines; ``job_secrets`` holds the job's own secret values.
"""
from __future__ import annotations

from .names import REDACTED
from .redact import Lines, know_job, redact_argv, redact_env, redact_evidence, redact_text, scrub

__all__ = ["REDACTED", "Lines", "know_job", "redact_argv", "redact_env", "redact_evidence", "redact_text", "scrub"]
