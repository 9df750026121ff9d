"""One full run-trainer result per cluster (issue 20): a launcher such as srun merges every node's stdout, so node
rank 0 prints the full result and every other node one line (its verdict, exit code, the root cause it found,
its run.json); `-v` gives a node the full result too. Every node still exits with its code and writes run.json.
Three real run-trainer nodes on 127.0.0.1-3 sharing one run dir, as on a cluster with a shared file system."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ddpdoctor.cluster.local import free_port, kill_sessions

pytestmark = pytest.mark.slow

FAILS_ON_RANK_1 = textwrap.dedent('''\
    import torch, torch.distributed as dist

    dist.init_process_group("gloo")
    for step in range(6):
        if step == 3 and dist.get_rank() == 1:
            raise RuntimeError("bad batch on rank 1")
        dist.all_reduce(torch.ones(4))
''')


@pytest.mark.timeout(300)
def test_node_rank_0_prints_the_result_other_nodes_one_line_or_all_of_it_with_v(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(FAILS_ON_RANK_1)
    run_dir, port = tmp_path / "runs", free_port()
    procs = []
    for node in range(3):
        argv = [sys.executable, "-m", "ddpdoctor", *(["-v"] if node == 2 else []), "run-trainer", "--no-preflight",
                "--nnodes", "3", "--nproc-per-node", "1", "--master", f"127.0.0.1:{port}",
                "--local-addr", f"127.0.0.{node + 1}", "--run-dir", str(run_dir), "--", str(script)]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True, env={**os.environ, "COLUMNS": "400"}))
    try:
        outs = [p.communicate(timeout=250) for p in procs]
    finally:
        kill_sessions(procs)
    codes = [p.returncode for p in procs]
    assert codes == [1, 1, 1], [err[-2000:] for _, err in outs]
    # torch's rendezvous orders the nodes by address: 127.0.0.1 is node rank 0; each node recorded its own
    ranks = {}
    for f in run_dir.glob("*/logs/*/node.json"):
        ranks[f.parent.name.split("-")[-2]] = json.loads(f.read_text())["node_rank"]
    assert ranks == {"127.0.0.1": 0, "127.0.0.2": 1, "127.0.0.3": 2}, ranks
    full, one, verbose = (out for out, _ in outs)
    # node rank 0: the full root-cause panel
    assert "run-trainer: FAIL — root cause" in full and "bad batch on rank 1" in full, full[-3000:]
    # node rank 1: one line (the ranks' own output goes to stderr), naming the root cause and its run.json
    lines = [ln for ln in one.splitlines() if ln.strip()]
    (run_json,) = run_dir.glob("*/run.json")
    assert len(lines) == 1, one
    assert lines[0].startswith("run-trainer [node rank 1 of 3]: FAIL (exit 1, root cause: rank 1, RuntimeError): "
                               "node rank 0 (127.0.0.1) printed the full result; "
                               f"this node's is in {run_json.resolve()}; -v prints it here too"), lines[0]
    # node rank 2 with -v: the full result, like node rank 0's
    assert "run-trainer: FAIL — root cause" in verbose and "bad batch on rank 1" in verbose, verbose[-3000:]
    assert "[node rank" not in full + verbose
    doc = json.loads(run_json.read_text())
    assert doc["root_cause"]["rank"] == 1 and doc["node"]["nnodes"] == 3
