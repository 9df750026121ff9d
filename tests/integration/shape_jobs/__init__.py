"""The job shapes forensics must name right (issue 30): user scripts in this folder, each fault chosen by its
first argument, and the runs the tests and the benchmarks share: the script under `ddpdoctor run-trainer` and
under plain `python -m torch.distributed.run --log-dir D --redirects 3` read by `ddpdoctor postmortem D`.

Every script is written as a user writes it: plain torch.distributed on gloo (CPU), its own
`init_process_group("gloo", timeout=timedelta(seconds=20))`, 3 or 4 ranks. A fault's line carries a
`# FAULT <mode>:` comment: that is where the culprit stands (file:line in the verdict). `STALL_FILE` (optional)
gets the wall-clock time the fault starts (the benchmarks' time to verdict counts from it); the `kill` shape
writes its pid to `PID_FILE`, and the runner SIGKILLs it from outside while the others wait in an all_reduce.

The verdict is read through the documented JSON fields only (`culprits_named`): `culprit_ranks`,
`root_cause` (`rank`, `location`) and `hang.verdict.culprits` (`rank`, `where`), with the judge's typed
`hang.verdict.named` / `likely_culprits` where a document has them.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
PG_TIMEOUT_S = 20  # every script's own init_process_group timeout
HANG_TIMEOUT_S = 8  # run-trainer's --hang-timeout for the shapes that hang: below the scripts' 20 s
KILL_AFTER_S = 1.5  # the kill shape: the others are inside the all_reduce by then


@dataclass(frozen=True)
class Shape:
    name: str
    script: str  # a file of this folder
    mode: str  # its first argument
    nproc: int
    culprits: tuple[int, ...]  # () for a healthy job: nothing may be named, exit 0
    where: str | None  # the needle of the culprit's line (`# FAULT mode:`), None where no place can be named
    hangs: bool = False  # the job stalls until a timeout: run-trainer runs with --hang-timeout
    kill_rank: int | None = None  # SIGKILLed from outside once it wrote $PID_FILE
    what: str = ""
    folder: Path = HERE  # the script's folder (tests/integration/library_jobs for the library jobs)
    args: tuple[str, ...] = ()  # after the mode (a pipeline's --schedule)
    marker_file: str | None = None  # the file holding the `# FAULT` line, when not the script (library_jobs/faults.py)
    straggler: int | None = None  # a rank that is slower in its own code: named live, the job passes
    stop_after_s: float | None = None  # SIGTERM to the whole job this long after the fault (a scheduler's limit)

    @property
    def path(self) -> Path:
        return self.folder / self.script

    @property
    def marked(self) -> Path:
        return self.folder / (self.marker_file or self.script)

    @property
    def line(self) -> int | None:
        if self.where is None:
            return None
        hits = [i + 1 for i, text in enumerate(self.marked.read_text().splitlines()) if self.where in text]
        assert len(hits) == 1, (self.script, self.where, hits)
        return hits[0]

    @property
    def location(self) -> str | None:
        return None if self.where is None else f"{self.marked}:{self.line}"


def _fault(script: str, mode: str, nproc: int, culprits: tuple[int, ...], what: str, where: bool = True,
           **kw) -> Shape:
    return Shape(f"{script.removesuffix('.py').replace('_', '-')}-{mode}", script, mode, nproc, culprits,
                 f"# FAULT {mode}:" if where else None, what=what, **kw)


def _healthy(script: str, nproc: int) -> Shape:
    return Shape(f"{script.removesuffix('.py').replace('_', '-')}-healthy", script, "healthy", nproc, (), None,
                 what="no fault")


FAULTS = [
    _fault("pipeline.py", "stuck", 4, (2,), "send/recv chain 0->1->2->3: rank 2 stuck in its compute before its "
           "send", hangs=True),
    _fault("pipeline.py", "shape", 4, (2,), "rank 2 sends a (4, 32) activation, rank 3 receives (4, 16)"),
    _fault("pipeline_1f1b.py", "stuck", 3, (1,), "send/recv both ways: rank 1 stuck in its backward before "
           "sending its gradient back", hangs=True),
    _fault("moe.py", "splits", 3, (1,), "all_to_all_single: rank 1's input splits send rank 0 one token too many"),
    _fault("moe.py", "hang", 3, (2,), "all_to_all: rank 2 stuck in its router", hangs=True),
    _fault("tpdp.py", "stuck", 4, (3,), "TP pairs [0,1] [2,3] + world: rank 3 stuck before its pair's "
           "all_reduce", hangs=True),
    _fault("fsdp.py", "skip", 3, (1,), "all_gather/reduce_scatter: rank 1 skips one all_gather", hangs=True),
    _fault("two_groups.py", "guarded", 3, (2,), "world + a metrics group: `if rank == last:` all_reduce in the "
           "metrics group", hangs=True),
    _fault("lifecycle.py", "noinit", 3, (2,), "rank 2 never reaches init_process_group", hangs=True),
    _fault("lifecycle.py", "kill", 3, (1,), "rank 1 SIGKILLed from outside while the others wait in an "
           "all_reduce", where=False, kill_rank=1),
    _fault("lifecycle.py", "early", 3, (2,), "rank 2 returns early (exit 0) while the others wait"),
]
HEALTHY = [_healthy(s, n) for s, n in (("pipeline.py", 4), ("pipeline_1f1b.py", 3), ("moe.py", 3), ("tpdp.py", 4),
                                          ("fsdp.py", 3), ("two_groups.py", 3), ("lifecycle.py", 3))]
SHAPES = {s.name: s for s in FAULTS + HEALTHY}


@dataclass
class Run:
    code: int | None  # None: killed at the limit
    doc: dict | None  # the --json document (run-trainer's, or postmortem's)
    stdout: str
    stderr: str
    seconds: float  # from the fault (STALL_FILE; the start where there is none) to the end
    fault_t: float | None = None


def job_env(shape: Shape, work: Path, extra: dict | None = None) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "STALL_FILE": str(work / "stall"),
            "PID_FILE": str(work / "pid"), "LOSS_DIR": str(work / "losses"), **(extra or {})}


def _stall(work: Path) -> float | None:
    try:
        return float((work / "stall").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _kill_when_ready(shape: Shape, work: Path, proc: subprocess.Popen, limit: float) -> None:
    """The kill shape: wait for the rank's pid file, let the others enter the all_reduce, SIGKILL the rank."""
    end = time.monotonic() + limit
    pid_file = work / "pid"
    while time.monotonic() < end and proc.poll() is None:
        if pid_file.exists():
            time.sleep(KILL_AFTER_S)
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
            return
        time.sleep(0.1)
    raise AssertionError(f"{shape.name}: rank {shape.kill_rank} never wrote its pid")


def _stop_when_hung(shape: Shape, work: Path, proc: subprocess.Popen, limit: float) -> None:
    """A scheduler's time limit (SLURM, scancel): SIGTERM to every process of the job, ``stop_after_s`` after the
    fault started (a job whose ranks hang with torch's 30-minute default timeout ends only this way)."""
    end = time.monotonic() + limit
    while time.monotonic() < end and proc.poll() is None:
        fault = _stall(work)
        if fault is not None and time.time() >= fault + shape.stop_after_s:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            return
        time.sleep(0.2)


def _run(argv: list[str], shape: Shape, work: Path, limit: float, env: dict | None = None,
         scheduler: bool = False) -> Run:
    """One process in a session of its own; whatever is left at ``limit`` (or after) is killed with it.
    ``scheduler``: a shape with ``stop_after_s`` is stopped as a scheduler stops a job (the whole session)."""
    import threading

    t0 = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=job_env(shape, work, env), start_new_session=True, cwd=work)
    if scheduler and shape.stop_after_s is not None:
        threading.Thread(target=_stop_when_hung, args=(shape, work, proc, limit), daemon=True).start()
    try:
        if shape.kill_rank is not None:
            _kill_when_ready(shape, work, proc, limit)
        out, err = proc.communicate(timeout=max(1.0, limit - (time.time() - t0)))
        code = proc.returncode
    except (subprocess.TimeoutExpired, AssertionError) as exc:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code, err = None, f"{err}\n[shape_jobs] {type(exc).__name__}: {exc}"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the session
        except (ProcessLookupError, PermissionError):
            pass
    ended = time.time()
    fault_t = _stall(work)
    return Run(code, _json(out), out, err, round(ended - (fault_t or t0), 1), fault_t)


def _json(text: str) -> dict | None:
    try:
        return json.loads(text) if text.strip().startswith("{") else None
    except ValueError:
        return None


def run_trainer(shape: Shape, work: Path, limit: float = 150, python: str = sys.executable,
                env: dict | None = None) -> Run:
    """`ddpdoctor run-trainer --nproc-per-node N [--hang-timeout 8] --json -- SCRIPT MODE` (``python``: the
    interpreter it and the job run under)."""
    work.mkdir(parents=True, exist_ok=True)
    flags = ["--hang-timeout", str(HANG_TIMEOUT_S)] if shape.hangs else []
    argv = [python, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--nproc-per-node", str(shape.nproc),
            *flags, "--run-dir", str(work / "run"), "--json", "--", str(shape.path), shape.mode, *shape.args]
    return _run(argv, shape, work, limit, env=env)


def run_torchrun(shape: Shape, work: Path, limit: float = 150) -> tuple[Run, Path, Path]:
    """Plain torchrun, as a user runs it: (the run, its --log-dir, its saved stderr)."""
    work.mkdir(parents=True, exist_ok=True)
    logs = work / "logs"
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(shape.nproc), "--redirects", "3",
            "--log-dir", str(logs), "--monitor-interval", "0.5", str(shape.path), shape.mode, *shape.args]
    # torchrun's output at LOGLEVEL=INFO, as postmortem's fix says: its "WorkerState.SUCCEEDED" line is the evidence
    # of a normal end a pass needs (at its default level it says nothing then: "not verified", exit 5)
    run = _run(argv, shape, work, limit, env={"LOGLEVEL": "INFO"}, scheduler=True)
    agent = work / "torchrun.stderr.log"
    agent.write_text(run.stderr)
    return run, logs, agent


def postmortem(logs: Path, *flags: str, limit: float = 60) -> tuple[int, dict | None, str]:
    """`ddpdoctor postmortem LOGS --json [flags]`: (exit code, document, stderr)."""
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "postmortem", str(logs), "--json", *flags],
                       capture_output=True, text=True, timeout=limit)
    return p.returncode, _json(p.stdout), p.stderr


def culprits_named(doc: dict | None) -> list[int]:
    """The ranks a document blames, every field together (an innocent rank in any one of them is named):
    `culprit_ranks`, `hang.verdict.culprits`, and where the judge writes them (issue 30's typed verdict,
    SCHEMA.md) `hang.verdict.named` and `hang.verdict.likely_culprits`."""
    if not doc:
        return []
    ranks = set(doc.get("culprit_ranks") or [])
    verdict = (doc.get("hang") or {}).get("verdict") or {}
    ranks |= {c["rank"] for c in verdict.get("culprits") or [] if c.get("rank") is not None}
    ranks |= {r for key in ("named", "likely_culprits") for r in verdict.get(key) or [] if isinstance(r, int)}
    return sorted(ranks)


def locations_named(doc: dict | None) -> set[str]:
    """Every file:line the document gives for its culprit(s): root_cause.location and the live culprits' where."""
    if not doc:
        return set()
    out = {(doc.get("root_cause") or {}).get("location")}
    out |= {c.get("where") for c in ((doc.get("hang") or {}).get("verdict") or {}).get("culprits") or []}
    return {o for o in out if o}
