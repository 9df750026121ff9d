"""How a job ended, from what it left: the evidence a normal end needs before anything may say "pass".

A torchrun log dir says nothing of a normal end: a rank's logs end the same way whether its script returned or
a scheduler's SIGTERM (sent to every process of the step at once) or the OOM killer's SIGKILL stopped it, and no
error file is written for a signal. Two records do say it:
- torchrun's own output at LOGLEVEL=INFO: "Local worker group finished (WorkerState.SUCCEEDED)" (the agent's
  api.py; "worker group successfully finished" in the line before it), for the last attempt it ran;
- the record each rank wrote at its exit under run-trainer (the bootstrap's flight record at exit, with
  ``ended.exit_code`` 0 when the script returned or called sys.exit(0)).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from . import job_files

# torch.distributed.elastic.agent.server.api: the agent's lines once its local worker group succeeded
AGENT_SUCCEEDED = re.compile(r"WorkerState\.SUCCEEDED|worker group successfully finished")
# ... and after a failure or a restart, so that a success line of an earlier attempt is not taken for the end
AGENT_NOT_DONE = re.compile(r"WorkerState\.(?:FAILED|UNHEALTHY)|Restarting worker group|death signal|"
                            r"SignalException|ChildFailedError")


def agent_succeeded(agent_text: str) -> bool:
    """torchrun's output says its worker group succeeded, and nothing after that line says otherwise."""
    last_ok = None
    for m in AGENT_SUCCEEDED.finditer(agent_text or ""):
        last_ok = m
    if last_ok is None:
        return False
    return AGENT_NOT_DONE.search(agent_text, last_ok.end()) is None


def ranks_ended_normally(records_dir: Path, ranks: list[int]) -> bool:
    """Every rank of the job wrote its record at exit saying its script ended with exit code 0 (run-trainer's
    bootstrap, ``flight_recorder/rank<R>.json``'s ``ended``). No rank known, or one record missing: not shown."""
    if not ranks:
        return False
    for rank in ranks:
        try:
            record = json.loads(job_files.read_text(records_dir / f"rank{rank}.json"))
        except (OSError, ValueError):
            return False
        ended = record.get("ended") if isinstance(record, dict) else None
        if not isinstance(ended, dict) or ended.get("exit_code") != 0:
            return False
    return True
