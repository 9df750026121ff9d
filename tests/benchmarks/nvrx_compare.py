"""NVIDIA Resiliency Extension's flight-recorder attribution (CollectiveAnalyzer) as a column of bench_fr_compare.

NVRx's FR attribution (`nvidia_resiliency_ext/attribution/trace_analyzer/fr_attribution.py`) is not in the PyPI
wheel (0.4.1 ships only `inprocess/attribution.py`), so the benchmark takes a source checkout of
github.com/NVIDIA/nvidia-resiliency-ext (`--nvrx-src DIR` or $NVRX_SRC: the checkout or its `src/`) and runs
it from there; none of NVRx's code is copied into this repository.

Each analysis runs in a child Python with only the checkout's `src/` put first on PYTHONPATH, so an installed
nvidia-resiliency-ext cannot shadow it and NVRx's event loop and logging never touch the benchmark. The child
is this file (`python nvrx_compare.py DUMP_DIR PATTERN`): it calls the programmatic API NVRx documents in
`skills/nvrx-attr/fr-analysis/SKILL.md` (`CollectiveAnalyzer(cfg).run_sync(cfg)`, no LLM) and prints one JSON
line: the `hanging_ranks` NVRx returns (its own parse of its "Missing Ranks" table) and the table itself.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

MODULE = "nvidia_resiliency_ext/attribution/trace_analyzer/fr_attribution.py"
PATTERN = "nccl_trace_rank_*"  # the dump names bench_fr_compare arranges (NVRx's default is "_dump_*")


def find_src(given: str | None) -> Path | None:
    """The `src/` dir of an NVRx checkout from --nvrx-src or $NVRX_SRC; None when neither is set."""
    given = given or os.environ.get("NVRX_SRC")
    if not given:
        return None
    for cand in (Path(given) / "src", Path(given)):
        if (cand / MODULE).is_file():
            return cand.resolve()
    raise SystemExit(f"--nvrx-src {given}: no {MODULE} under it or its src/ (a GitHub checkout of "
                     "NVIDIA/nvidia-resiliency-ext is needed; the PyPI wheel lacks it)")


def nvrx_revision(src: Path) -> str:
    """The checkout's commit when it is a git work tree, else the folder: what the figures were measured with."""
    p = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else str(src)


def attribute(folder: Path, src: Path, timeout: float = 120) -> tuple[list[int] | None, str]:
    """The ranks NVRx blames on one dump set, or None with why (no dump, crashed, no answer)."""
    if not folder.is_dir() or not any(folder.glob(PATTERN)):
        return None, "no dump"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    try:
        p = subprocess.run([sys.executable, __file__, str(folder), PATTERN], capture_output=True, text=True,
                           env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"no answer in {timeout:g} s"
    return parse(p.stdout, p.stderr)


def parse(stdout: str, stderr: str) -> tuple[list[int] | None, str]:
    """The child's JSON line; its error (an exception NVRx raised, or its import failing) as a short note."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if not lines:
        last = [ln for ln in stderr.strip().splitlines() if ln.strip()] or ["no output"]
        return None, f"crashed: {last[-1].strip()[:60]}"
    doc = json.loads(lines[-1])
    if "error" in doc:
        return None, f"crashed: {doc['error'][:60]}"
    return doc["ranks"], ""


def ranks_of(hanging: str) -> list[int]:
    """NVRx returns its verdict as the text 'hanging ranks: [1, 2]'."""
    m = re.search(r"\[([\d,\s]*)\]", hanging)
    return sorted({int(x) for x in m.group(1).split(",") if x.strip()}) if m else []


def _child(folder: str, pattern: str) -> int:
    """Run in the child: NVRx's documented call, its answer as one JSON line on stdout."""
    import nvidia_resiliency_ext
    from nvidia_resiliency_ext.attribution.trace_analyzer.fr_attribution import CollectiveAnalyzer

    # run_sync's dict replaces the constructor's for the run, so both get the whole config
    cfg = {"fr_path": folder, "pattern": pattern, "verbose": False, "health_check": False, "llm_analyze": False,
           "model": None, "base_url": None, "debug": False}
    try:
        payload, _state = CollectiveAnalyzer(cfg).run_sync(cfg)
    except Exception as e:  # NVRx raises ValueError when it could read no dump: a miss, not a benchmark failure
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 0
    print(json.dumps({"ranks": ranks_of(payload["hanging_ranks"]), "table": payload["analysis_text"],
                      "module": nvidia_resiliency_ext.__file__}))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2]))
