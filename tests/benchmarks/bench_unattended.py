"""Benchmark: the unattended node check on a healthy node, and `ddpdoctor report --history` over 10,000 results.

    python tests/benchmarks/bench_unattended.py [--runs 5] [--files 10000] [--only node-check|history]

node-check: `ddpdoctor-slurm-check` as slurmd runs a health check (an environment of SLURMD_NODENAME only, a stand-in
scontrol that answers at once: the controller's round trip is not ddpdoctor's), every default check, torch's import
included, then as a job's prolog and epilog (SLURM_SCRIPT_CONTEXT), which import no torch and read the facts the
health check kept; median of --runs fresh processes each, beside `python -c "import torch"` on the same machine.
Targets: health check 10 s, prolog and epilog 1 s each (LBNL NHC's time beside them where `nhc` is installed).
history: --files result files (node-check records padded to a real record's ~20 KB, and nccl-bench results, 10
nodes), `ddpdoctor report --history` twice: the first reads every file into the index, the second only looks for new
ones. Target: 3 s to the page (the second run, as every later run is).
Exit 0 when both targets are met, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

NODE_CHECK_TARGET_S = 10.0
PROLOG_TARGET_S = 1.0
HISTORY_TARGET_S = 3.0
BIN = Path(sys.executable).parent


def wall(argv: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    return time.perf_counter() - start, p


def node_check(runs: int, tmp: Path) -> bool:
    """The health check (every default check, torch's import included: it keeps torch's facts), then the prolog
    and the epilog of a job, which read those facts and import no torch."""
    scontrol = tmp / "scontrol"
    scontrol.write_text("#!/bin/sh\n[ \"$1\" = show ] && echo \"NodeName=$4 State=IDLE Reason=(null)\"\nexit 0\n")
    scontrol.chmod(0o755)
    site = tmp / "site.toml"
    site.write_text(f'[node-check]\nresults_dir = "{tmp / "results"}"\nscontrol = "{scontrol}"\n')
    health_env = {"SLURMD_NODENAME": "bench", "DDPDOCTOR_CONFIG": str(site)}  # all a health check gets
    check = [str(BIN / "ddpdoctor-slurm-check")]
    torch = [sys.executable, "-c", "import torch"]
    wall(torch)
    times: dict[str, list[float]] = {"health_check": [], "prolog": [], "epilog": []}
    torch_times = []
    for i in range(runs):
        torch_times.append(wall(torch)[0])
        for context in times:
            env = dict(health_env)
            if context != "health_check":
                env.update(SLURM_SCRIPT_CONTEXT=f"{context}_slurmd", SLURM_JOB_ID=str(100 + i))
            t, p = wall(check, env)
            assert p.returncode == 0, p.stdout + p.stderr
            times[context].append(t)
    records = [json.loads(f.read_text()) for f in sorted((tmp / "results" / "bench").glob("*.json"))]
    health = [r for r in records if r["node_check"]["context"] == "health_check"]
    prologs = [r for r in records if r["node_check"]["context"] == "prolog"]
    skipped = sorted({c for r in health for n in r["nodes"].values() for c, o in n["gather"].items()
                      if "budget" in (o.get("message") or "")})
    unkept = sorted({r["check"] for r in prologs for r in r["results"] if "not measured" in r["summary"]})
    med = {k: statistics.median(v) for k, v in times.items()}
    ok = (med["health_check"] <= NODE_CHECK_TARGET_S and not skipped and not unkept
          and max(med["prolog"], med["epilog"]) <= PROLOG_TARGET_S)
    print(f"node check, median wall of {runs} fresh processes each (every default check):")
    print(f"  health check {med['health_check']:.2f} s (target {NODE_CHECK_TARGET_S:g} s; python -c 'import torch' "
          f"{statistics.median(torch_times):.2f} s; gather {statistics.median(r['timings']['gather_s'] for r in health):.2f} s)"
          f"; checks skipped for the budget: {skipped or 'none'}")
    print(f"  prolog {med['prolog']:.2f} s, epilog {med['epilog']:.2f} s (target {PROLOG_TARGET_S:g} s each; no torch "
          f"import, the health check's facts kept; checks without kept facts: {unkept or 'none'}) "
          f"{'OK' if ok else 'MISSED'}")
    nhc = shutil.which("nhc")
    if nhc:
        t = statistics.median(wall([nhc], {})[0] for _ in range(runs))
        print(f"  LBNL NHC beside it: {t:.2f} s")
    else:
        print("  LBNL NHC: not installed here (no Debian package found), not measured")
    return ok


def history(files: int, tmp: Path) -> bool:
    from tests.history_fixtures import write_history

    root = tmp / "history"
    nodes = 10
    runs = files // (2 * nodes)
    start = time.perf_counter()
    written = write_history(root, nodes=nodes, runs=runs, bench_every=1, pad=20_000)
    size = sum(f.stat().st_size for f in root.rglob("*.json"))
    print(f"history: {written} result files, {size / 2**20:.0f} MiB, written in {time.perf_counter() - start:.1f} s")
    argv = [sys.executable, "-m", "ddpdoctor", "report", "--history", "--results-dir", str(root)]
    cold, p = wall(argv)
    assert p.returncode == 0, p.stderr[-2000:]
    warm = [wall(argv)[0] for _ in range(3)]
    med = statistics.median(warm)
    ok = med <= HISTORY_TARGET_S
    print(f"  first report (every file read into the index): {cold:.2f} s")
    print(f"  later reports (index up to date): median {med:.2f} s of 3 (target {HISTORY_TARGET_S:g} s) "
          f"{'OK' if ok else 'MISSED'}; page {(root / 'history.html').stat().st_size / 1024:.0f} KiB")
    print("  " + p.stdout.splitlines()[0])
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--only", choices=("node-check", "history"))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ddpdoctor-bench-unattended-"))
    try:
        ok = True
        if args.only in (None, "node-check"):
            ok &= node_check(args.runs, tmp)
        if args.only in (None, "history"):
            ok &= history(args.files, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("DDPDOCTOR_NO_SAVE", "1")
    sys.exit(main())
