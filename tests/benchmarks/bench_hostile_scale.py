"""Round 4's attacks on scale (issue 38): how long `ddpdoctor postmortem` takes on a log dir of 10,000 rank
folders (several layouts), how large its `--json` is for a dump claiming 65,536 ranks, and how long `ddpdoctor
report` takes on a document of 10^6 empty nodes. Each case is a fresh `python -m ddpdoctor` process; the figures
are its wall clock and its CPU time (user + system, from the child's rusage: a loaded machine inflates the first,
hardly the second).

    python3 tests/benchmarks/bench_hostile_scale.py                 # every case
    python3 tests/benchmarks/bench_hostile_scale.py --only ranks-timeout,report-1m --keep /tmp/hs
    python3 tests/benchmarks/bench_hostile_scale.py --code /path/to/other/checkout   # that code, same inputs
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TB = ('Traceback (most recent call last):\n  File "/job/train.py", line 41, in <module>\n    main()\n'
      '  File "/job/train.py", line 33, in main\n    dist.all_reduce(t)\n{error}')
TIMEOUT = ("torch.distributed.DistBackendError: [Rank {r}]: Watchdog caught collective operation timeout: "
           "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 "
           "milliseconds before timing out.")


def _error_file(path: Path, rank: int, error: str) -> None:
    tb = TB.format(error=error)
    path.write_text(json.dumps({"message": {"message": error, "extraInfo": {"py_callstack": tb, "timestamp": "1"}}}))


def _stderr(path: Path, rank: int, error: str, filler_lines: int = 0) -> None:
    lines = [f"[rank{rank}]: step {i} loss 2.{i % 10}" for i in range(filler_lines)]
    lines += [f"[rank{rank}]: {line}" for line in TB.format(error=error).splitlines()]
    path.write_text("\n".join(lines) + "\n")


def ranks(root: Path, n: int = 10_000, *, attempts: int = 1, error: str | None = "RuntimeError: boom {r}",
          filler_lines: int = 0, nodes: int = 1) -> Path:
    """torchrun's layout, <logs>/<run>/attempt_<k>/<local rank>/, every rank with an error file and a stderr
    log (``error``: None for folders with a clean log only); ``nodes`` > 1 puts one such folder per node side by
    side (a shared run dir)."""
    per = n // (attempts * nodes)
    logs = root / "logs"
    for node in range(nodes):
        node_dir = logs if nodes == 1 else root / "run" / f"node{node}-10.0.0.{node}-1"
        for a in range(attempts):
            attempt = node_dir / "rid_x" / f"attempt_{a}"
            for local in range(per):
                r = node * per + local
                d = attempt / str(local)
                d.mkdir(parents=True)
                if error is None:
                    (d / "stderr.log").write_text(f"[rank{r}]: step 1 loss 2.3\n")
                    continue
                text = error.format(r=r)
                _error_file(d / "error.json", r, text)
                _stderr(d / "stderr.log", r, text, filler_lines)
    return logs if nodes == 1 else root / "run" / "node0-10.0.0.0-1"


def claimed_world(root: Path, world: int = 65_536) -> Path:
    """Three ranks' dumps whose process group claims ``world`` ranks; rank 2 is one collective behind."""
    logs = root / "logs"
    attempt = logs / "rid_x" / "attempt_0"
    for r in range(2):
        (attempt / str(r)).mkdir(parents=True)
    _error_file(attempt / "1" / "error.json", 1, "RuntimeError: boom")
    members = json.dumps(list(range(world)))
    for r, seq in ((0, 3), (1, 3), (2, 2)):
        entry = {"collective_seq_id": seq, "pg_id": 0, "process_group": ["0", "default"],
                 "profiling_name": "nccl:all_reduce", "time_created_ns": 5, "state": "scheduled",
                 "frames": [{"filename": "train.py", "line": 4, "name": "main"}]}
        doc = {"version": "2.4", "entries": [entry], "pg_config": {"0": {"name": "0", "desc": "d", "ranks": members}},
               "pg_status": {"0": {"last_enqueued_collective": seq, "last_completed_collective": seq - 1}}}
        (logs / f"nccl_trace_rank_{r}").write_text(json.dumps(doc))
    return logs


def empty_nodes(root: Path, n: int = 1_000_000) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests import report_fixtures as rf

    doc = rf.preflight(2, evil=False)
    doc["nodes"] = {f"n{i}": {} for i in range(n)}
    path = root / "nodes.json"
    path.write_text(json.dumps(doc))
    return path


def timed(argv: list[str], limit_s: float = 900, code: str | None = None) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    env = {**os.environ, "DDPDOCTOR_NO_SAVE": "1", "COLUMNS": "100"}
    cmd = [sys.executable, "-m", "ddpdoctor", *argv]
    if code:  # another checkout's ddpdoctor: the editable install's finder (this checkout) taken out first
        cmd = [sys.executable, "-c", "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in "
               f"repr(f)]; sys.path.insert(0, {code!r}); from ddpdoctor.cli import main; main(sys.argv[1:])", *argv]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s, env=env)
    except subprocess.TimeoutExpired:
        return {"rc": None, "wall_s": limit_s, "cpu_s": None, "note": f"killed after {limit_s:.0f} s"}
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"rc": p.returncode, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "stdout_bytes": len(p.stdout),
            "stdout_lines": p.stdout.count("\n"), "stderr_tail": p.stderr[-300:]}


CASES = {
    # 10,000 rank folders, one attempt: every rank raised (4,096 read: evidence_io.DIR_ENTRIES)
    "ranks-exc": lambda root: (["postmortem", str(ranks(root))], {}),
    "ranks-exc-json": lambda root: (["postmortem", str(ranks(root)), "--json"], {}),
    # every rank timed out in its collective (the hang-shaped records and the judge over them)
    "ranks-timeout": lambda root: (["postmortem", str(ranks(root, error=TIMEOUT))], {}),
    # 10 attempts of 1,000 ranks each
    "ranks-attempts": lambda root: (["postmortem", str(ranks(root, attempts=10))], {}),
    # logs of 2,000 lines before the traceback (the 512 KiB tail read, the prefix strip and the redaction)
    "ranks-long-logs": lambda root: (["postmortem", str(ranks(root, filler_lines=2000))], {}),
    # a shared run dir: 10 nodes of 1,000 ranks whose local ranks were all stopped (the others' logs read too)
    "ranks-nodes": lambda root: (["postmortem", str(ranks(root, nodes=10, error=(
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process {r} got signal: 15")))], {}),
    # 10,000 clean folders and nothing failed
    "ranks-clean": lambda root: (["postmortem", str(ranks(root, error=None))], {}),
    "claimed-65536-json": lambda root: (["postmortem", str(claimed_world(root)), "--json"], {}),
    "report-1m": lambda root: (["report", str(empty_nodes(root)), "-o", str(root / "r.html")], {}),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--keep", help="build the inputs under this folder and keep them (reused when there)")
    ap.add_argument("--code", help="run this checkout's ddpdoctor (PYTHONPATH) instead of the installed one")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(CASES)
    for name in names:
        root = Path(args.keep) / name if args.keep else Path(tempfile.mkdtemp(prefix="ddpdoctor-hs-"))
        argv_file = root / "argv.json"
        try:
            t0 = time.monotonic()
            if argv_file.exists():  # built by an earlier run with --keep: the same inputs for another --code
                argv = json.loads(argv_file.read_text())
            else:
                shutil.rmtree(root, ignore_errors=True)
                root.mkdir(parents=True)
                argv, _ = CASES[name](root)
                argv_file.write_text(json.dumps(argv))
            built = time.monotonic() - t0
            result = timed(argv, code=args.code)
            print(json.dumps({"case": name, "code": args.code or "installed", "built_s": round(built, 1), **result}),
                  flush=True)
        finally:
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
