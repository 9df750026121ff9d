"""Running a job: torchrun as a child (its output passed through), the hang watchdog beside it, then the
post-mortem and the run-trainer document (run.json). Ctrl-C stops torchrun, which stops its workers; what
is left after a grace period is killed, so nothing outlives the command."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from .. import model
from . import hang, postmortem, torchrun
from .config import TrainerConfig, node_label

MAX_POINTS = 500


def _has_cuda() -> bool:
    """An NVIDIA driver is present. Checked without importing torch here: that import alone costs ~2 s, a
    tax on every run, and the workers import torch anyway."""
    return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidia0")


def _pump(src, sinks) -> None:
    for line in iter(src.readline, ""):
        for sink in sinks:
            try:
                sink.write(line)
                sink.flush()
            except (OSError, ValueError):
                pass


def launch(cfg: TrainerConfig, *, echo: bool = True, stdout_to_stderr: bool = False) -> dict:
    label = node_label(cfg)
    logs = torchrun.log_dir(cfg, label)
    logs.mkdir(parents=True, exist_ok=True)
    agent_log = logs / "agent.stderr.log"
    argv = torchrun.argv(cfg, logs)
    env = torchrun.environment(cfg, _has_cuda())
    started = time.time()
    out_sink = sys.stderr if stdout_to_stderr else sys.stdout
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace")
    with open(agent_log, "w") as agent_file:
        pumps = [threading.Thread(target=_pump, args=(proc.stdout, [out_sink] if echo else []), daemon=True),
                 threading.Thread(target=_pump, args=(proc.stderr, [agent_file] + ([sys.stderr] if echo else [])),
                                  daemon=True)]
        for t in pumps:
            t.start()
        dog = hang.Watchdog(proc, Path(cfg.run_dir), logs, cfg.hang_timeout).start() if cfg.hang_timeout else None
        try:
            proc.wait()
        except KeyboardInterrupt:
            hang.stop_agent(proc, grace=30.0)  # torchrun got the SIGINT too; make sure it and its workers end
            raise
        finally:
            if dog:
                dog.stop()
            for t in pumps:
                t.join(5)
    wall = time.time() - started
    return build_document(cfg, proc.returncode, agent_log.read_text(errors="replace"), logs, wall,
                          dog.report if dog else None)


def read_metrics(run_dir: Path) -> dict[str, list[dict]]:
    out = {}
    for path in sorted((run_dir / "metrics").glob("rank*.jsonl")):
        rows = []
        for line in path.read_text().splitlines():
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


def checksums(run_dir: Path) -> bool | None:
    path = run_dir / "checksums.jsonl"
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return all(r.get("equal") for r in rows) if rows else None


def hang_root_cause(report: dict) -> dict:
    ranks = report.get("stalled_ranks") or []
    who = f"rank(s) {', '.join(map(str, ranks))}" if ranks else "no single rank (all stopped together)"
    return {"rank": ranks[0] if ranks else None, "local_rank": None, "host": socket.gethostname(), "exit_code": None,
            "signal": None, "category": "hang", "error_type": "Hang",
            "message": f"no rank made progress for {report['stalled_s']:.0f} s; behind the others: {who}",
            "location": _hang_location(report, ranks), "traceback": "\n".join(
                f"--- rank {r} ---\n{s}" for r, s in report.get("stacks", {}).items()),
            "fix": "look at the stack of the rank(s) behind: a rank that never reaches the collective the others "
                   "wait in (a data loader stall, a rank-dependent branch, a deadlock) hangs the whole job",
            "log_tail": "", "victim": False, "reason": ""}


def _hang_location(report: dict, ranks: list[int]) -> str | None:
    for r in ranks:
        frames = postmortem.FRAME.findall(report.get("stacks", {}).get(str(r), ""))
        for file, line, _ in frames:  # faulthandler prints the innermost frame first
            if not any(part in file for part in postmortem.LIBRARY):
                return f"{file}:{line}"
    return None


def build_document(cfg: TrainerConfig, code: int, agent_stderr: str, logs: Path, wall: float,
                   hang_report: dict | None) -> dict:
    run_dir = Path(cfg.run_dir)
    verdict = postmortem.analyse(logs, agent_stderr, socket.gethostname())
    metrics = read_metrics(run_dir)
    root = verdict.root_cause.to_json() if verdict.root_cause else None
    consequences = [f.to_json() for f in verdict.consequences]
    if hang_report:
        if root:
            consequences.insert(0, dict(root, victim=True, reason="stopped by the hang watchdog"))
        root = hang_root_cause(hang_report)
    failed = code != 0 or hang_report is not None
    if failed and root is None:
        root = {"rank": None, "local_rank": None, "host": socket.gethostname(), "exit_code": code, "signal": None,
                "category": "unknown", "error_type": None,
                "message": f"torchrun exited with code {code} and no rank left an error record",
                "location": None, "fix": f"read torchrun's own output in {logs / 'agent.stderr.log'}",
                "traceback": "", "log_tail": "\n".join(agent_stderr.splitlines()[-30:]), "victim": False, "reason": ""}
    return model.envelope(
        "run-trainer",
        config=cfg.to_json(),
        verdict="fail" if failed else "pass",
        exit_code=model.EXIT_FAIL if failed else model.EXIT_OK,
        torchrun_exit_code=code,
        restarts=max(0, len(verdict.attempts) - 1),
        attempts=verdict.attempts,
        wall_s=round(wall, 2),
        metrics=metrics,
        metrics_summary=metrics_summary(metrics),
        checksums_equal=checksums(run_dir),
        root_cause=root if failed else None,
        consequences=consequences if failed else [],
        hang=hang_report,
        logs=str(logs),
        preflight=None,
    )
