"""Benchmark: live straggler naming (forensics/live/stragglers.py): false alarms on healthy jobs, the rank named on a
5x straggler, and the cost of judging each poll.

    python tests/benchmarks/bench_stragglers.py healthy [--runs 20] [--load 2] [--steps 60]
    python tests/benchmarks/bench_stragglers.py straggler [--runs 5]
    python tests/benchmarks/bench_stragglers.py overhead [--ranks 8]

healthy: real run-trainer jobs (2 ranks, gloo, a user DDP script stepping every ~0.1 s), optionally beside
--load busy processes (a loaded machine's jitter); counts the runs that named any straggler (target: 0).
straggler: the same script with rank 1 five times slower in its own code; counts the runs that named rank 1.
overhead: the CPU time of one poll's judgement (Live.observe) on flight records of --ranks ranks holding
torchrun.FR_ENTRIES collectives each, as a share of the watchdog's polling period (2 s) and of a step: the
judgement runs in run-trainer's process, never in a rank; it costs the ranks at most the CPU it takes from
them on a full machine (target: <= 1 % of step time).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.integration.test_live import SLOW, SLOWER  # noqa: E402
from tests.integration.test_forensics import USER_DDP  # noqa: E402


def _burn(stop_at: float) -> None:
    while time.time() < stop_at:
        sum(i * i for i in range(10_000))


def one_run(script: Path, mode: str, steps: int) -> dict:
    run_dir = tempfile.mkdtemp(prefix="bench-straggler-")
    argv = [sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--json", "--run-dir", run_dir,
            "--nproc-per-node", "2", "--", str(script), mode]
    env = {**__import__("os").environ, "STEPS": str(steps), "STEP_S": "0.1"}
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    doc = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
    return {"rc": p.returncode, "stragglers": doc.get("stragglers"), "wall_s": doc.get("wall_s")}


def jobs(mode: str, runs: int, load: int, steps: int) -> list[dict]:
    script = Path(tempfile.mkdtemp(prefix="bench-straggler-script-")) / "user_ddp.py"
    script.write_text(USER_DDP.replace(SLOW, SLOWER))
    out = []
    for i in range(runs):
        burners = [multiprocessing.Process(target=_burn, args=(time.time() + 600,), daemon=True) for _ in range(load)]
        for b in burners:
            b.start()
        try:
            r = one_run(script, mode, steps)
        finally:
            for b in burners:
                b.terminate()
                b.join()
        out.append(r)
        print(f"run {i + 1}/{runs}: exit {r['rc']}, {r['wall_s']} s, stragglers named: {r['stragglers']}", flush=True)
    return out


def overhead(ranks: int, polls: int = 50) -> None:
    from ddpdoctor.forensics.live.stragglers import Live
    from ddpdoctor.launch.torchrun import FR_ENTRIES

    n, step = int(FR_ENTRIES), 0.1
    rng = random.Random(0)
    live = Live()
    live.restart(0.0)
    spent = []
    for poll in range(polls):  # each poll: 20 new collectives (2 s of 0.1 s steps), the last n in each record
        base = poll * 20
        frs = {}
        for r in range(ranks):
            entries = [{"collective_seq_id": seq, "process_group": ["0", ""], "is_p2p": False,
                        "time_created_ns": int((seq * step + rng.uniform(0, 0.005)) * 1e9)}
                       for seq in range(max(0, base + 20 - n), base + 20)]
            frs[r] = {"entries": entries, "pg_status": {"0": {"last_completed_collective": base + 19}}}
        t0 = time.process_time()
        live.observe(frs, float(poll))
        spent.append(time.process_time() - t0)
    spent.sort()
    median = spent[len(spent) // 2]
    print(f"Live.observe, {ranks} ranks x {n} entries: median {median * 1e3:.1f} ms CPU per poll, worst "
          f"{spent[-1] * 1e3:.1f} ms; per 2 s poll: {median / 2.0 * 100:.2f} % of one core; per 0.1 s step (20 steps a "
          f"poll): {median / 20 / step * 100:.2f} % of a step's time")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("healthy", "straggler", "overhead"))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--load", type=int, default=0, help="busy processes beside each job (a loaded machine)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--ranks", type=int, default=8)
    args = ap.parse_args()
    if args.what == "overhead":
        overhead(args.ranks)
        return 0
    results = jobs("straggle" if args.what == "straggler" else "healthy", args.runs, args.load, args.steps)
    failed = sum(r["rc"] != 0 for r in results)
    if args.what == "healthy":
        alarms = sum(bool(r["stragglers"]) for r in results)
        print(f"false alarms: {alarms} of {len(results)} healthy runs (load {args.load}); {failed} run(s) failed")
        return 0 if alarms == 0 and failed == 0 else 1
    named = sum([s["rank"] for s in r["stragglers"] or []] == [1] for r in results)
    print(f"rank 1 named: {named} of {len(results)} runs; {failed} run(s) failed")
    return 0 if named == len(results) and failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
