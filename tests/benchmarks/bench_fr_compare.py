"""ddpdoctor's hang and desync verdicts against torch's own flight-recorder analyzer, on the same jobs.

    python tests/benchmarks/bench_fr_compare.py                     # every scenario (about 10-15 minutes)
    python tests/benchmarks/bench_fr_compare.py --only sleep-r1-3,healthy-3 --json out.json
    python tests/benchmarks/bench_fr_compare.py --only shapes       # issue 30's job shapes only
    python tests/benchmarks/bench_fr_compare.py --nvrx-src ~/nvidia-resiliency-ext   # + NVRx's attribution

Each scenario is a plain gloo DDP job (tests/integration/fr_job.py) with the user's own process-group timeout
(15 s) and one fault on 2-4 ranks. It runs twice:

1. under plain torchrun (`--redirects 3 --log-dir`), the job arranging flight-recorder dumps as a user would for
   torch's analyzer: every rank dumps (pickle) when the hang is on ("live", taken 5 s after the fault) and as it
   ends ("after": exit, exception or the launcher's SIGTERM). Each set goes through
   `python -m torch.distributed.flight_recorder.fr_trace` (as written, and with pg_config repaired: torch 2.13's
   gloo dumps key the default group '' where the entries say '0') and through `ddpdoctor postmortem LOGDIR
   --fr-dir SET`; the log dir alone (no dump) through `ddpdoctor postmortem` too.
2. under `ddpdoctor run-trainer` with default settings (no --hang-timeout): its own live forensics.

The job shapes of issue 30 (tests/integration/shape_jobs/: pipelines, MoE all_to_all, TP x DP, FSDP-like, two
process groups, a rank that never starts, is SIGKILLed or leaves early; the scripts' own 20 s timeout) run the
same way, the script unchanged under `shape_jobs/with_fr_dumps.py`, which arranges the same dumps around it.

With `--nvrx-src DIR` (or $NVRX_SRC), a GitHub checkout of NVIDIA/nvidia-resiliency-ext, every dump set (as
written and repaired) also goes through NVRx's flight-recorder attribution (`CollectiveAnalyzer`, no LLM; see
nvrx_compare.py beside this file): the "hanging ranks" it returns.

A cell is the rank(s) the tool names (fr_trace: "missing ranks: {...}" and "Culprit rank N" in its log; it exits
0 whatever it finds) and the time from the fault to that answer; a healthy run is right when nothing is named.
Everything runs in its own session and is killed at the scenario's time limit; nothing is left running.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.integration import shape_jobs  # noqa: E402
from tests.integration.fr_job import JOB  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nvrx_compare  # noqa: E402

PG_TIMEOUT = 15
LIVE_AFTER_S = 5.0  # the live dumps are taken this long after the fault: the hang is on, the timeout not yet
LIMIT_S = 240


@dataclass
class Scenario:
    name: str
    nproc: int
    mode: str
    culprits: list[int]
    what: str
    shape: str | None = None  # a job of tests/integration/shape_jobs/ instead of fr_job.py

    @property
    def aborts(self) -> bool:
        """gloo aborts the job within a second (a size mismatch): no live phase, no live dump."""
        return self.mode in ("dtype", "shape") if self.shape is None else self.shape in ("pipeline-shape", "moe-splits")


SCENARIOS = [
    Scenario("sleep-r1-3", 3, "sleep", [1], "rank 1 stuck in data loading"),
    Scenario("sleep-r0-4", 4, "sleep", [0], "rank 0 stuck in data loading"),
    Scenario("two-culprits-4", 4, "sleep", [1, 2], "ranks 1 and 2 stuck in data loading"),
    Scenario("barrier-2", 2, "barrier", [0], "`if rank == 0: dist.barrier()`"),
    Scenario("barrier-3", 3, "barrier", [0], "`if rank == 0: dist.barrier()`"),
    Scenario("dtype-4", 4, "dtype", [2], "rank 2 all_reduces float64, the others float32"),
    Scenario("shape-4", 4, "shape", [1], "rank 1 all_reduces 8 elements, the others 16"),
    Scenario("stuck-3", 3, "stuck", [2], "rank 2 frozen (SIGSTOP) inside an all_reduce every rank entered"),
    Scenario("healthy-3", 3, "healthy", [], "no fault"),
    *(Scenario(s.name, s.nproc, s.mode, list(s.culprits), s.what, shape=s.name) for s in shape_jobs.SHAPES.values()),
]


@dataclass
class Answer:
    ranks: list[int] | None  # None: the tool gave no answer (crashed, no data)
    seconds: float | None
    note: str = ""


@dataclass
class Result:
    scenario: str
    nproc: int
    what: str
    culprits: list[int]
    answers: dict[str, Answer] = field(default_factory=dict)


def run_session(argv: list[str], env: dict, limit: float, cwd: Path, on_tick=None) -> tuple[int | None, str, str, float]:
    """Run in its own session; whatever is left at ``limit`` is killed with the whole session."""
    start = time.time()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env={**os.environ, **env}, cwd=cwd,
                                start_new_session=True)
        try:
            while proc.poll() is None:
                if time.time() - start > limit:
                    raise subprocess.TimeoutExpired(argv, limit)
                if on_tick:
                    on_tick()
                time.sleep(0.1)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the session (a stopped rank)
                except ProcessLookupError:
                    pass
            proc.wait()
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), time.time()


def stall_time(path: Path) -> float | None:
    try:
        return float(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# ---------------------------------------------------------------- the tools
def fr_trace(folder: Path, repaired: bool) -> tuple[list[int] | None, str]:
    files = sorted(folder.glob("nccl_trace_rank_*")) if folder.is_dir() else []
    if not files:
        return None, "no dump"
    target = folder
    if repaired:
        target = folder.parent / f"{folder.name}-repaired"
        target.mkdir(exist_ok=True)
        for f in files:
            data = pickle.loads(f.read_bytes())
            data["pg_config"] = {("0" if k == "" else k): dict(v, name=v.get("name") or "0",
                                                               desc=v.get("desc") or "default_pg")
                                 for k, v in data.get("pg_config", {}).items()}
            (target / f.name).write_bytes(pickle.dumps(data))
    p = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(target), "-p",
                        "nccl_trace_rank_", "--allow-incomplete-ranks"], capture_output=True, text=True, timeout=120)
    text = p.stdout + p.stderr
    if "Traceback (most recent call last)" in text:
        last = [ln for ln in text.strip().splitlines() if ln.strip()][-1]
        return None, f"crashed: {last.strip()[:60]}"
    ranks: set[int] = set()
    for m in re.finditer(r"missing ranks: \{([\d, ]*)\}", text):
        ranks |= {int(x) for x in m.group(1).replace(" ", "").split(",") if x}
    for m in re.finditer(r"Culprit rank (\d+)", text):
        ranks.add(int(m.group(1)))
    return sorted(ranks), ""


def postmortem(logs: Path, agent_log: Path, fr_dir: Path | None) -> tuple[list[int] | None, str]:
    argv = [sys.executable, "-m", "ddpdoctor", "postmortem", str(logs), "--agent-log", str(agent_log), "--json"]
    if fr_dir is not None:
        if not any(fr_dir.glob("nccl_trace_rank_*")):
            return None, "no dump"
        argv += ["--fr-dir", str(fr_dir)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        return None, f"no document (exit {p.returncode})"
    if doc.get("verdict") == "fail" and not doc.get("culprit_ranks"):
        return None, "names no culprit"
    return doc.get("culprit_ranks") or [], _note(doc)


def _note(doc: dict) -> str:
    rc = doc.get("root_cause") or {}
    return f"{rc.get('error_type') or rc.get('category') or ''}".strip() if rc else "pass"


# ---------------------------------------------------------------- one scenario
def run_scenario(sc: Scenario, work: Path, nvrx_src: Path | None = None) -> Result:
    res = Result(sc.name, sc.nproc, sc.what, sc.culprits)
    if sc.shape is None:
        script = work / "job.py"
        script.write_text(JOB)
        plain_argv, trainer_argv = [str(script), sc.mode], [str(script), sc.mode]
    else:
        shape = shape_jobs.SHAPES[sc.shape]
        plain_argv = [str(shape_jobs.HERE / "with_fr_dumps.py"), str(shape.path), shape.mode]
        trainer_argv = [str(shape.path), shape.mode]
    env = {"CULPRITS": ",".join(map(str, sc.culprits)) or "0", "PG_TIMEOUT": str(PG_TIMEOUT),
           "TORCH_FR_BUFFER_SIZE": "200", "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    if sc.mode == "healthy":
        env["CULPRITS"] = ""
    # 1. plain torchrun, the dumps a user would arrange
    dumps, logs, stall = work / "dumps", work / "logs", work / "stall.plain"
    dumps.mkdir()
    live_taken: list[float] = []

    def tick():
        t = stall_time(stall)
        if sc.shape and sc.mode == "healthy" and t is None and time.time() >= started + 12:
            t = started  # the shapes' healthy jobs mark nothing: their live dumps 12 s in (after start-up)
        if t is not None and not live_taken and time.time() >= t + (1.0 if sc.mode == "healthy" else LIVE_AFTER_S):
            (dumps / "live.trigger").write_text("")
            live_taken.append(time.time())
        kill_from_outside(sc, work)

    started = time.time()

    code, _, err, ended = run_session(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(sc.nproc), "--redirects", "3",
         "--log-dir", str(logs), "--monitor-interval", "0.5", *plain_argv],
        {**env, "FR_DUMPS": str(dumps), "STALL_FILE": str(stall), "PID_FILE": str(work / "pid.plain")}, LIMIT_S,
        work, tick)
    agent_log = work / "torchrun.stderr"
    agent_log.write_text(err)
    t0 = stall_time(stall) or ended
    for kind in ("live", "after"):
        folder = dumps / kind
        ready = (live_taken[0] + 0.5) if kind == "live" and live_taken else ended
        for name, repaired in (("fr_trace", False), ("fr_trace repaired", True)):
            start = time.time()
            ranks, note = fr_trace(folder, repaired)
            if kind == "live" and not live_taken and sc.aborts:
                note = NO_LIVE
            res.answers[f"{name} {kind}"] = Answer(ranks, round(ready - t0 + time.time() - start, 1), note)
        if nvrx_src is not None:
            no_live = kind == "live" and not live_taken and sc.aborts
            nvrx_columns(res, nvrx_src, folder, kind, ready - t0, no_live)
        start = time.time()
        ranks, note = postmortem(logs, agent_log, folder)
        if kind == "live" and not live_taken and sc.aborts:
            note = NO_LIVE
        res.answers[f"postmortem {kind}"] = Answer(ranks, round(ready - t0 + time.time() - start, 1), note)
    start = time.time()
    ranks, note = postmortem(logs, agent_log, None)
    res.answers["postmortem no dump"] = Answer(ranks, round(ended - t0 + time.time() - start, 1), note)
    if code == 0 and sc.mode != "healthy":
        res.answers["note"] = Answer(None, None, f"plain job exited 0: {err[-300:]}")
    # 2. run-trainer, default settings
    stall2 = work / "stall.trainer"
    code, out, err, ended = run_session(
        [sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--nproc-per-node", str(sc.nproc),
         "--run-dir", str(work / "run"), "--json", "--", *trainer_argv],
        {**env, "STALL_FILE": str(stall2), "PID_FILE": str(work / "pid.trainer")}, LIMIT_S, work,
        lambda: kill_from_outside(sc, work))
    try:
        doc = json.loads(out)
        ranks, note = doc.get("culprit_ranks") or [], _note(doc)
        if doc.get("verdict") == "fail" and not ranks:
            ranks, note = None, "names no culprit"
        if doc.get("hang"):
            note += f", {doc['hang']['threshold']['source']}"
    except ValueError:
        ranks, note = None, f"no document (exit {code}): {err[-200:]}"
    res.answers["run-trainer"] = Answer(ranks, round(ended - (stall_time(stall2) or ended), 1), note)
    return res


def nvrx_columns(res: Result, src: Path, folder: Path, kind: str, waited: float, no_live: bool) -> None:
    """NVRx on the dumps as written and on fr_trace's repaired copy (written beside them just before)."""
    for name, target in (("NVRx", folder), ("NVRx repaired", folder.parent / f"{folder.name}-repaired")):
        start = time.time()
        ranks, note = nvrx_compare.attribute(target, src)
        note = NO_LIVE if no_live else note
        res.answers[f"{name} {kind}"] = Answer(ranks, round(waited + time.time() - start, 1), note)


def kill_from_outside(sc: Scenario, work: Path) -> None:
    """The kill shape: SIGKILL the rank that wrote its pid file, once the others are inside the all_reduce."""
    if sc.shape is None or shape_jobs.SHAPES[sc.shape].kill_rank is None:
        return
    for pid_file in (work / "pid.plain", work / "pid.trainer"):
        done = pid_file.with_name(pid_file.name + ".killed")
        if pid_file.exists() and not done.exists() and time.time() - pid_file.stat().st_mtime >= shape_jobs.KILL_AFTER_S:
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
            done.write_text("")


NVRX_COLUMNS = ["NVRx live", "NVRx after", "NVRx repaired live", "NVRx repaired after"]
COLUMNS = ["fr_trace live", "fr_trace after", "fr_trace repaired live", "fr_trace repaired after", *NVRX_COLUMNS,
           "postmortem live", "postmortem after", "postmortem no dump", "run-trainer"]


def right(a: Answer, culprits: list[int]) -> bool:
    return a.ranks is not None and sorted(a.ranks) == sorted(culprits)


def applies(a: Answer | None) -> bool:
    """A live dump of a job gloo aborted within a second does not exist: no live phase, nothing to score."""
    return a is not None and a.note != NO_LIVE


NO_LIVE = "no live phase (gloo aborted at once)"


def cell(a: Answer | None, culprits: list[int]) -> str:
    if a is None:
        return "—"
    if not applies(a):
        return "n/a"
    if a.ranks is None:
        return f"✗ {a.note}"
    who = ",".join(map(str, a.ranks)) if a.ranks else "none"
    return f"{'✓' if right(a, culprits) else '✗'} {who} ({a.seconds:g} s)"


def table(results: list[Result]) -> str:
    # NVRx's columns only where it ran (--nvrx-src), so the tables of runs without it keep their shape
    columns = [c for c in COLUMNS if c not in NVRX_COLUMNS or any(c in r.answers for r in results)]
    head = ["scenario", "ranks", "true culprit", *columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        lines.append("| " + " | ".join([r.scenario, str(r.nproc), ",".join(map(str, r.culprits)) or "none",
                                         *(cell(r.answers.get(c), r.culprits) for c in columns)]) + " |")
    scored = {c: [r for r in results if applies(r.answers.get(c))] for c in columns}
    lines.append("| right | | | " + " | ".join(
        f"{sum(right(r.answers[c], r.culprits) for r in scored[c])}/{len(scored[c])}" for c in columns) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated scenario names")
    ap.add_argument("--json", help="write the results as JSON too")
    ap.add_argument("--keep", action="store_true", help="keep the work dirs (printed)")
    ap.add_argument("--nvrx-src", metavar="DIR", default=None,
                    help="a checkout of github.com/NVIDIA/nvidia-resiliency-ext (or $NVRX_SRC): "
                         "add NVRx's flight-recorder attribution as columns")
    ap.add_argument("--table-from", metavar="JSON", help="print the table of an earlier run's --json, run nothing")
    args = ap.parse_args()
    if args.table_from:
        doc = json.loads(Path(args.table_from).read_text())
        results = [Result(**{**r, "answers": {k: Answer(**a) for k, a in r["answers"].items()}}) for r in doc["results"]]
        for r in results:
            for c in ("fr_trace live", "fr_trace repaired live", "postmortem live"):
                a = r.answers.get(c)
                if a is not None and a.note == "no dump" and r.scenario.startswith(("dtype", "shape")):
                    a.note = NO_LIVE
        print(f"torch {doc['torch']}" + (f", NVRx {doc['nvrx']}" if doc.get("nvrx") else ""))
        print(table(results))
        return 0
    import torch

    nvrx_src = nvrx_compare.find_src(args.nvrx_src)
    nvrx = nvrx_compare.nvrx_revision(nvrx_src) if nvrx_src else None
    want = set((args.only or "").split(","))
    chosen = [s for s in SCENARIOS if not args.only or s.name in want or ("shapes" in want and s.shape)]
    results = []
    for sc in chosen:
        work = Path(tempfile.mkdtemp(prefix=f"frcmp-{sc.name}-"))
        try:
            t = time.time()
            results.append(run_scenario(sc, work, nvrx_src))
            print(f"{sc.name}: {time.time() - t:.0f} s " + "; ".join(
                f"{k}: {cell(v, sc.culprits)}" for k, v in results[-1].answers.items()), file=sys.stderr, flush=True)
        finally:
            if args.keep:
                print(f"kept {work}", file=sys.stderr)
            else:
                shutil.rmtree(work, ignore_errors=True)
    print(f"torch {torch.__version__}, gloo, CPU; process-group timeout {PG_TIMEOUT} s (fr_job), "
          f"{shape_jobs.PG_TIMEOUT_S} s (shape jobs); live dumps {LIVE_AFTER_S:g} s after the fault; "
          "time = from the fault to the answer" + (f"; NVRx {nvrx} from {nvrx_src}" if nvrx else ""))
    print(table(results))
    if args.json:
        doc = {"torch": torch.__version__, "nvrx": nvrx, "results": [asdict(r) for r in results]}
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
