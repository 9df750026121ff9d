"""One summary per cluster (issue 20): a launcher such as srun merges every node's stdout, so the master prints the
full summary and every other node one line (its exit code's verdict and where the master wrote the cluster
result); `-v` gives a node the full summary too. Every node still exits with the cluster's code and writes its
own JSON, which holds everything. Real node processes on 127.0.0.x (the real srun: tests/integration/test_slurm.py)."""
from __future__ import annotations

import json

import pytest

from tests.cluster_procs import budget_s, cluster  # noqa: F401 - fixture

TIMEOUT = 15
pytestmark = pytest.mark.slow


@pytest.mark.timeout(150)
def test_master_prints_the_summary_other_nodes_one_line_or_all_of_it_with_v(cluster, tmp_path):
    c = cluster(3)
    out = tmp_path / "out"
    master = c.start_master(timeout=TIMEOUT, json_out=False, output=str(out))
    quiet = c.start(1, timeout=TIMEOUT, json_out=False, output=str(out))
    verbose = c.start(2, "-v", timeout=TIMEOUT, json_out=False, output=str(out))
    codes = c.finish(budget_s(TIMEOUT))
    assert codes == {0: 0, 1: 0, 2: 0}, c.report()
    # the master: the full summary, with every passing check
    assert "ddpdoctor preflight [cluster: 3 nodes] verdict: PASS" in master.stdout
    assert "PASS   mesh" in master.stdout and "launch-args" in master.stdout
    # node rank 1: one line, saying where the cluster result is
    lines = [ln for ln in quiet.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, quiet.stdout
    assert "cluster verdict: PASS (exit 0, no problem found)" in lines[0]
    assert f"printed the full summary and wrote the cluster result to {out}/cluster.json" in lines[0]
    # node rank 2 with -v: the full summary, like the master's
    assert "ddpdoctor preflight [cluster: 3 nodes] verdict: PASS" in verbose.stdout and "PASS   mesh" in verbose.stdout
    # every node's JSON holds everything the master decided
    docs = {f.name: json.loads(f.read_text()) for f in out.glob("*.json")}
    assert len(docs) == 3 and "cluster.json" in docs, sorted(docs)
    results = docs["cluster.json"]["results"]
    for name, doc in docs.items():
        assert doc["exit_code"] == 0 and doc["results"][:len(results)] == results, name
        assert doc["master"]["node"] == docs["cluster.json"]["this_node"]
        assert doc["master"]["output_dir"] == str(out)
