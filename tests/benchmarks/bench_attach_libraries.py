"""Benchmark: `ddpdoctor attach` on hung jobs built on torch's libraries (issue 37's matrix), one job per row.

    python tests/benchmarks/bench_attach_libraries.py [--only ddp,fsdp2,...] [--jobs DIR]

Each job is one of tests/integration/library_jobs/ (the forensics suite's jobs: gloo on CPU, rank FAULT_RANK=1
asleep in its own code at step 3, `python <job>.py hang`), started as users start it: plain torchrun, Lightning's
own launcher (`python lightning_job.py hang --devices 2`), `accelerate launch`, Ray Train (`python ray_job.py
hang`). When the fault starts (STALL_FILE) attach runs once (`--json --interval 2 --wait 10`), before the jobs'
20-second process-group timeout (Ray's job: 30 s) ends the hang. Printed per row: the verdict (category, the
ranks named), what the others wait in (the library the table names, whether native frames were read), and
attach's wall time. Expected: rank 1 named, no innocent rank.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from ddpdoctor.cluster.local import free_port

JOBS = Path(__file__).resolve().parents[1] / "integration" / "library_jobs"


def torchrun(nproc: int, script: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-port",
            str(free_port()), script, "hang", *args]


def cases(jobs: Path) -> dict[str, list[str]]:
    # `accelerate launch` as the module its console script runs (a venv over a parent environment has no script)
    accelerate = [sys.executable, "-m", "accelerate.commands.launch"]
    return {
        "ddp": torchrun(2, str(jobs / "ddp_job.py")),
        "ddp-compile": torchrun(2, str(jobs / "ddp_job.py"), "--compile"),
        "fsdp2": torchrun(2, str(jobs / "fsdp2_job.py")),
        "tp-fsdp2-2d": torchrun(4, str(jobs / "tp_job.py")),
        "gpipe": torchrun(2, str(jobs / "pipelining_job.py"), "--schedule", "gpipe"),
        "1f1b": torchrun(3, str(jobs / "pipelining_job.py"), "--schedule", "1f1b"),
        "interleaved": torchrun(2, str(jobs / "pipelining_job.py"), "--schedule", "interleaved"),
        "batch-p2p": torchrun(3, str(jobs / "pipelining_job.py"), "--schedule", "batch"),
        "lightning-torchrun": torchrun(2, str(jobs / "lightning_job.py")),
        "lightning-own-launcher": [sys.executable, str(jobs / "lightning_job.py"), "hang", "--devices", "2"],
        # Ray Train: Ray starts its workers itself (`python ray_job.py hang`: a TorchTrainer over 2 CPU workers)
        "ray-train": [sys.executable, str(jobs / "ray_job.py"), "hang"],
        "accelerate-launch": [*accelerate, "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                              "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
                              str(free_port()), str(jobs / "accelerate_job.py"), "hang"],
    }


def run_case(name: str, argv: list[str], tmp: Path) -> dict:
    stall = tmp / f"{name}.stall"
    # RAY_TMPDIR, RESULTS_DIR: Ray's session and Ray Train's storage in the run's own folder (the other jobs: unread)
    env = dict(os.environ, STALL_FILE=str(stall), FAULT_RANK="1", OMP_NUM_THREADS="1", RAY_TMPDIR=str(tmp),
               RESULTS_DIR=str(tmp / "results"))
    job = subprocess.Popen(argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                           stderr=open(tmp / f"{name}.log", "wb"))
    try:
        deadline = time.monotonic() + 300
        while not stall.exists():
            if job.poll() is not None or time.monotonic() > deadline:
                tail = (tmp / f"{name}.log").read_text()[-300:]
                return {"name": name, "error": f"the job never reached its fault: {tail}"}
            time.sleep(0.2)
        time.sleep(1.0)  # the others into their wait
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "ddpdoctor", "attach", "--pid", str(job.pid), "--json", "--no-save",
                              "--interval", "2", "--wait", "10"], capture_output=True, text=True, timeout=120)
        took = time.perf_counter() - t0
        try:
            doc = json.loads(res.stdout)
        except ValueError:
            return {"name": name, "error": f"exit {res.returncode}: {res.stderr.strip()[-300:]}"}
        diag = doc["diagnosis"]
        waits = sorted({f"{(r.get('wait') or {}).get('library') or (r.get('wait') or {}).get('op') or 'own code'}"
                        + ("+native" if r.get("native") else "") for r in doc["ranks"] if r["rank"] != 1})
        return {"name": name, "exit": res.returncode, "launcher": (doc.get("job") or {}).get("launcher"),
                "category": diag.get("category"), "named": diag.get("named"),
                "likely": diag.get("likely_culprits"), "waits": waits, "s": round(took, 2),
                "summary": diag.get("summary", "")[:160]}
    finally:
        family = []
        try:
            family = psutil.Process(job.pid).children(recursive=True)
        except psutil.Error:
            pass
        for p in family:
            try:
                p.kill()
            except psutil.Error:
                pass
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        job.wait(30)
        psutil.wait_procs(family, timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="comma-separated rows (default: all)")
    ap.add_argument("--jobs", type=Path, default=JOBS, help="the library jobs' folder")
    args = ap.parse_args()
    table = cases(args.jobs)
    names = args.only.split(",") if args.only else list(table)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            row = run_case(name, table[name], Path(tmp))
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| job | launcher | verdict | named | the others wait in | attach |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if "error" in r:
            print(f"| {r['name']} | | error: {r['error'][:80]} | | | |")
            continue
        print(f"| {r['name']} | {r['launcher']} | {r['category']} (exit {r['exit']}) | {r['named'] or '-'}"
              f"{' (likely ' + str(r['likely']) + ')' if r['likely'] and not r['named'] else ''} | "
              f"{', '.join(r['waits'])} | {r['s']} s |")


if __name__ == "__main__":
    main()
