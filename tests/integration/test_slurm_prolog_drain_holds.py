"""A drain by the job's nodes' meeting holds until its cause is re-checked (issue 56 item 2), on the suite's real
SLURM with README's lines pasted, `cross_node = true` and a site key: node3's clock 5 s ahead (libfaketime preloaded
in node3's own /etc, so its slurmd's prologs and health checks run 5 s ahead); a 3-node job's meeting drains node3
for clock-skew, with the source and the command an admin types in the reason; node3's health check (as slurmd runs
it: SLURMD_NODENAME only) passes its own checks and keeps the drain, with the skew there and after it is gone (a
health check cannot see a skew: before, it resumed the node and the requeued job's prolog drained it again, a loop
every HealthCheckInterval); the admin's command from the reason brings it back, and the requeued job's prologs meet,
pass and run it there.

Only what a test cannot wait for is changed from README's lines: sched_interval (as test_slurm_prolog.py) and
AuthInfo's cred_expire (a requeued job is eligible again cred_expire + 1 s later). A cluster of its own (198.18.11.0/24, controller port 6917). Cost: about 60 s and 40 CPU-seconds.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.integration.test_slurm_prolog import CHECK, CONF, site, squeue, wait_for
from tests.slurm_cluster import SlurmCluster, running, unavailable

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FAKETIME = next((p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                             "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1") if os.path.exists(p)), None)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if unavailable():
        pytest.skip(unavailable())
    if FAKETIME is None or shutil.which("nsenter") is None:
        pytest.skip("needs libfaketime (apt-get install faketime)")
    results = tmp_path_factory.mktemp("drain-holds-results")
    os.chmod(results, 0o755)
    key = tmp_path_factory.mktemp("key") / "cross-node.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    # three nodes' meeting children import torch on the suite's 2 shared cores: the default 10 s, and then 20 s, were
    # spent under the whole suite's load in CI (node2 never joined the requeued job's meeting); a meeting ends as
    # soon as every node is in, so 45 s costs a quiet run nothing
    text = site(results).replace("[node-check]\n", f'[node-check]\ncross_node = true\ncross_node_budget_s = 45\n'
                                 f'cross_node_key = "{key}"\n', 1)
    # a requeued job waits cred_expire + 1 s before it is eligible again (121 s by default)
    c = SlurmCluster(subnet="198.18.11", port=6917, extra_conf=CONF, auth_extra=",cred_expire=10",
                     node_etc={"ddpdoctor/ddpdoctor.toml": text})
    with running(c, results):
        yield c


def node3(c: SlurmCluster) -> tuple[str, str]:
    state, _, reason = c.run(["sinfo", "-h", "-N", "-n", "node3", "-o", "%T|%E"], timeout=15).stdout.strip() \
        .partition("|")
    return state, reason


def health_check(c: SlurmCluster) -> dict:
    """node3's health check as slurmd runs it (its namespaces, SLURMD_NODENAME only): its record."""
    before = set((c.results / "node3").glob("*-health_check.json"))
    pid = str(c.slurmd[3].pid)
    p = c.in_node_mounts(3, "nsenter", "-t", pid, "-n", "-u", "env", "-i", "SLURMD_NODENAME=node3", CHECK)
    assert p.returncode == 0, p.stderr
    (new,) = set((c.results / "node3").glob("*-health_check.json")) - before
    return json.loads(new.read_text())["node_check"]


@pytest.mark.timeout(420)
def test_a_meetings_drain_stays_through_health_checks_and_comes_back_by_the_command_in_its_reason(cluster, tmp_path):
    c = cluster
    for i in (1, 2, 3):
        wait_for(f"node{i}'s first health check", lambda i=i: list((c.results / f"node{i}").glob("*-health_check.json")),
                 c, limit=90)
    c.in_node_mounts(3, "sh", "-c", f"echo {FAKETIME} > /etc/ld.so.preload && echo +5s > /etc/faketimerc")
    out = tmp_path / "job.out"
    job = c.run(["sbatch", "-N3", "-o", str(out), "--wrap", "hostname"], timeout=30).stdout.split()[-1]
    state, reason = wait_for("node3 drained by the meeting", lambda: "drain" in node3(c)[0] and node3(c), c, limit=180)
    assert reason.startswith("ddpdoctor: clock-skew [meeting]: node3 is "), reason
    command = re.search(r"once fixed: (scontrol update NodeName=node3 State=RESUME)", reason)
    assert command, reason

    held = health_check(c)  # the skew still there: a health check cannot see it, and does not resume
    assert held["action"] == "keep" and "not re-checked" in held["why"], held
    assert "drain" in node3(c)[0]
    c.in_node_mounts(3, "rm", "-f", "/etc/ld.so.preload", "/etc/faketimerc")
    held = health_check(c)  # fixed, but nothing re-measured the clock against the others: still held
    assert held["action"] == "keep" and "drain" in node3(c)[0], held
    assert squeue(c, job, "%T") == "PENDING" and not out.exists()

    c.run(command.group(1).split(), timeout=15)  # what the reason tells the admin to type
    wait_for("the requeued job's output", lambda: out.is_file() and out.read_text().strip(), c, limit=120)
    met = sorted((c.results / "node3").glob(f"*-prolog-{job}.json"))
    last = json.loads(met[-1].read_text())["node_check"]
    assert last["cross_node"].get("verdict") == "pass" and last["action"] == "none", json.dumps(last["cross_node"])
    time.sleep(1)
    assert "drain" not in node3(c)[0], node3(c)
