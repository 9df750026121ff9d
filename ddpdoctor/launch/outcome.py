"""The run-trainer document of a finished job (run.json): the root cause and consequences the forensics decide
(forensics.postmortem.trainer_run), the metrics the ranks wrote and their summary, checksums.

Pure reading of what the job left; running the job is ``run``'s.
"""
from __future__ import annotations

import json
import signal
from pathlib import Path

from .. import documents
from ..forensics.evidence import job_files
from ..forensics.judge.decide import decide
from ..forensics.postmortem import trainer_run
from . import records
from .config import TrainerConfig, resumed_run


MAX_POINTS = 500


def blame_the_disk(doc: dict, problems: list[str], run_dir: Path) -> None:
    """A failure whose records say nothing, on a run dir that could not be written: the full disk is the
    likely cause (the ranks' logs and error files were lost the same way), so the root cause says so."""
    rc = doc.get("root_cause")
    if not rc or rc.get("message") or rc.get("category") not in ("unknown", None):
        return
    rc["message"] = f"the ranks left no readable record, and {problems[0]}"
    rc["fix"] = (f"free space where --run-dir points ({run_dir}) or point --run-dir at a disk with room, then "
                 "rerun: the ranks' logs, error files and run.json are written there")


def read_metrics(run_dir: Path) -> dict[str, list[dict]]:
    out = {}
    for path in sorted((run_dir / "metrics").glob("rank*.jsonl")):
        rows = []
        for line in job_files.read_text(path).splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
        stride = max(1, len(rows) // MAX_POINTS)
        out[path.stem[4:]] = rows[::stride] if stride > 1 else rows
    return out


def metrics_summary(metrics: dict[str, list[dict]]) -> dict:
    if not metrics:
        return {}
    rank0 = metrics.get("0") or next(iter(metrics.values()))
    per_rank_tps = [sum(r["tokens_per_s"] for r in rows) / len(rows) for rows in metrics.values() if rows]
    steps = [r["step_time_s"] for rows in metrics.values() for r in rows]
    return {
        "steps": max((r["step"] for rows in metrics.values() for r in rows), default=0),
        "first_loss": rank0[0]["loss"] if rank0 else None,
        "final_loss": rank0[-1]["loss"] if rank0 else None,
        "tokens_per_s_mean": round(sum(per_rank_tps), 1),  # the job's throughput: every rank's share added
        "step_time_s_mean": round(sum(steps) / len(steps), 5) if steps else None,
        "peak_mem_bytes": max((r.get("peak_mem_bytes") or 0 for rows in metrics.values() for r in rows), default=0),
        "ranks": len(metrics),
    }


def collectives_summary(summary: dict) -> dict:
    ranks = summary.get("ranks") or {}
    done = [r["completed"] for r in ranks.values() if r.get("completed") is not None]
    gaps = sorted(r["interval_s_median"] for r in ranks.values() if r.get("interval_s_median") is not None)
    straggler = summary.get("straggler") or {}
    return {"collectives": max(done) if done else 0, "collective_interval_s": gaps[len(gaps) // 2] if gaps else None,
            "ranks": len(ranks), "straggler_rank": straggler.get("rank"),
            "straggler_late_s": straggler.get("late_s_median")}


def checksums(run_dir: Path) -> bool | None:
    path = run_dir / "checksums.jsonl"
    if not path.exists():
        return None
    rows = []
    for line in job_files.read_text(path).splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:  # a line cut by a rank that died mid-write
            continue
    return all(isinstance(r, dict) and r.get("equal") for r in rows) if rows else None


def build_document(cfg: TrainerConfig, code: int, agent_stderr: str, logs: Path, wall: float,
                   hang_report: dict | None, interrupted: int | None = None) -> dict:
    run_dir = cfg.records()
    evidence, failures, context, notes = trainer_run.gather(code, agent_stderr, logs, run_dir, hang_report,
                                                            interrupted)
    outcome = decide(evidence, failures, context)
    record = outcome.record
    metrics = read_metrics(run_dir)
    findings = failures.findings
    return documents.envelope(
        "run-trainer",
        run_id=cfg.rendezvous_id(),
        config=cfg.to_json(),
        verdict=outcome.verdict,
        exit_code=outcome.exit_code(interrupted),
        interrupted=signal.Signals(interrupted).name if interrupted else None,
        start=records.start_info(run_dir, resumed_run(cfg)),
        torchrun_exit_code=code,
        restarts=max(0, len(findings.attempts) - 1),
        attempts=findings.attempts,
        wall_s=round(wall, 2),
        metrics=metrics,
        metrics_summary=metrics_summary(metrics),
        checksums_equal=checksums(run_dir),
        root_cause=record.root,
        consequences=list(record.consequences),
        culprit_ranks=list(record.culprit_ranks),
        hang=hang_report,
        outcome=outcome.to_json(),
        logs=str(logs),
        node=records.node_of(logs),  # node rank 0 prints the full result; the others one line (trainer_cmd)
        input_notes=notes,
        warnings=trainer_run.size_warnings(run_dir) if outcome.verdict == "pass" else [],
        preflight=None,
    )
